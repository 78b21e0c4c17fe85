"""The run path: the stages a run goes through on this instance, from the due query to its end
written: fetch, claim, arm (claimed runs wait in memory for their time), record, pool, execute
(runner, outcomes), end (its end worked out) and write (ends in batches); the values handed between
them (due runs, tasks) and a run's states. The dispatcher (scheduler/dispatcher.py) drives them.
"""
