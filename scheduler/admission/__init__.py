"""What the fetch admits when more is due than runs at once: each domain its weight's share of a
backlog and no more than its cap (fair_share.py), each concurrency key no more than its limit
(key_limits.py). Policies the fetch stage (run/fetch.py) applies to the runs it reads; they
read the store through its ports and hold no run themselves."""
