"""When things run: cron expressions, schedules and their fire times, misfire planning and retry
backoff. Pure functions of a job and "now": no store, no clock of their own.
"""
