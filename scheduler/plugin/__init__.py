"""What a handler plug-in sees of tickd, and what stands between its code and the daemon: the
handler API exported as `tickd` itself (api.py), the registry that loads handlers by name from
entry points (registry.py), each run's context (contexts.py) and the SSRF-safe HTTP client it
carries as `ctx.http` (http.py), the outcome of a call made storable whatever the handler
returned or raised (outcomes.py), the guards against a handler's leftover tasks and forked
children (leftover_tasks.py, forked_children.py), and helpers to test a handler without a
daemon (testing.py).
"""
