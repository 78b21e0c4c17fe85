"""What keeps the store and the instance healthy beside the run path: the reaper (expired leases, a
clock step), heartbeats, the outbox relay, retention, the backlog gauges, the domains' lag
objectives and the loop-stall watchdog. The dispatcher calls the reaper, the clock steps and the
backlog gauges within its tick; the rest are tasks of one shape, `run(stop)`.
"""
