"""Concurrency keys: a job may name a key (`Job.concurrency_key`, e.g. `endpoint:api.vendor.com`)
and a limit (`Job.concurrency_limit`): at most that many runs of the jobs naming the key are in
flight at once, across all instances. A run over the limit waits in the store, claimed by no one,
until a run of its key ends.

Exact across instances: a keyed job lives in its key's partition (scheduler/partitions.py,
job_partition), so one instance, the partition's owner, admits every run of the key, counting
the key's leases held in the store (those of a previous owner's runs still in flight too). The
rules of a key and a limit live here alone.
"""

from __future__ import annotations

import re

MAX_KEY_LENGTH = 200
MAX_CONCURRENCY_LIMIT = 10_000
KEY_PATTERN = rf"^[!-~]{{1,{MAX_KEY_LENGTH}}}$"
KEY_RULE = f"1 to {MAX_KEY_LENGTH} printable ASCII characters without spaces"

_KEY = re.compile(KEY_PATTERN)


def is_key(text: object) -> bool:
    """Whether `text` is a key a job may name (KEY_PATTERN, the whole of it)."""
    return isinstance(text, str) and _KEY.fullmatch(text) is not None


def key_problem(key: str | None, limit: int | None, shards: int) -> tuple[str, str] | None:
    """What is wrong with a job's key and limit, as (field, message); None if nothing."""
    if key is None and limit is None:
        return None
    if key is None:
        return "concurrency_key", "is needed with a concurrency_limit"
    if not is_key(key):
        return "concurrency_key", f"must be {KEY_RULE}"
    if isinstance(limit, bool) or not isinstance(limit, int):
        return "concurrency_limit", "is needed with a concurrency_key: a whole number"
    if not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        return "concurrency_limit", f"must be from 1 to {MAX_CONCURRENCY_LIMIT:,}"
    if shards != 1:
        # A sharded occurrence's shards run at once under one lease: a key would count one.
        return "concurrency_key", "cannot be named by a sharded job"
    return None
