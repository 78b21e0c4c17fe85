"""JSON from the other side of a connection, read with a bound on how deeply it nests.

Python's parser recurses once per level and fails with RecursionError about a thousand levels
down, which no caller expects; and a store takes far fewer levels (MongoDB: 100). So the depth is
measured before anything is parsed, in time linear in the size and without recursion, and a text
nested too deeply is refused as what it is: TooDeep, a ValueError. The standard library alone, so
that the client can use it too.
"""

from __future__ import annotations

import json
from array import array
from itertools import accumulate
from typing import Any

# No body the API takes nests this deeply (a job's params included): far below what the stores
# and parsers allow.
MAX_DEPTH = 32

# An opening bracket becomes 1 and a closing one -1 (as a signed byte); every other byte goes.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


class TooDeep(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels")
        self.limit = limit


def loads(raw: bytes, *, max_depth: int = MAX_DEPTH, **options: Any) -> Any:
    """`json.loads` of UTF-8 bytes (JSON's only encoding between systems, RFC 8259), refusing
    more than `max_depth` nested arrays and objects. ValueError (UnicodeDecodeError, TooDeep or
    json's own) for anything else."""
    text = raw.decode("utf-8")
    brackets = raw.count(b"[") + raw.count(b"{")  # fast: most texts end the check here
    if brackets > max_depth and depth(raw) > max_depth:
        raise TooDeep(max_depth)
    return json.loads(text, **options)


def depth(raw: bytes) -> int:
    """How deeply the arrays and objects of UTF-8 JSON nest; for text that is not JSON, never
    less than what a parser reaches before it stops at the first error."""
    # Escapes first, left to right as a parser pairs them (an escaped backslash, then an escaped
    # quote): every quote left opens or closes a string, and what strings hold does not nest.
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside_strings = b"".join(unescaped.split(b'"')[::2])
    steps = array("b", outside_strings.translate(_STEPS, _NOT_BRACKETS))
    return max(accumulate(steps), default=0)
