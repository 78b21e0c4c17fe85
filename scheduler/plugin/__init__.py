"""What a handler plug-in sees of tickd: the handler API exported as `tickd` itself (api.py), the
registry that loads handlers by name from entry points (registry.py), the SSRF-safe HTTP client
they get as `ctx.http` (http.py), and helpers to test a handler without a daemon (testing.py).
"""
