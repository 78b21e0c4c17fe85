"""Settings: one frozen, validated object (settings.py), from a TOML file and `TICKD_*` variables
(sources.py), each setting declared with its type and range (limits.py) and checked at start
(checks.py); the API's bearer tokens (api_tokens.py).
"""
