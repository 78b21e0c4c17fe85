"""How many examples a property test draws: every one in `make test` and CI, a fifth in
`make quick` (QUICK_TESTS=1), whose inner loop trades depth for speed."""

from __future__ import annotations

import os


def examples(count: int) -> int:
    if os.environ.get("QUICK_TESTS"):
        return max(20, count // 5)
    return count
