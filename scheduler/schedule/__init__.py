"""When things run: cron expressions, schedules and their fire times, misfire planning, retry
backoff, and a sharded occurrence's shards (shards.py). Pure functions of a job and "now": no
store, no clock of their own.
"""
