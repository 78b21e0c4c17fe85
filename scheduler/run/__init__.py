"""The run path: the stages a run goes through on this instance, from the due query to its end
written, each handing the next a value: fetch (what there is room for), claim (lock and lease),
arm (claimed runs wait in memory for their time), record, pool (the workers), execute (the
handler under its deadline), end (its end worked out) and write (ends in batches). The ledger
holds every run from its claim until its end is written, and the values handed between the
stages; states.py names a run's states. The dispatcher (scheduler/dispatcher.py) builds and
drives them.
"""
