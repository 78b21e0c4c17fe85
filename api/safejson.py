"""JSON from the other side of a connection, read with a bound on how deeply it nests; and the
API's models as JSON, whatever text a store holds.

Python's parser recurses once per level and fails with RecursionError about a thousand levels
down, which no caller expects; and a store takes far fewer levels (MongoDB: 100). So the depth is
measured before anything is parsed, in time linear in the size and without recursion, and a text
nested too deeply is refused as what it is: TooDeep, a ValueError. Reading needs the standard
library alone, so that the client can use it too.
"""

from __future__ import annotations

import json
from array import array
from itertools import accumulate
from typing import Any, Protocol

from tickd.scheduler.plugin.outcomes import storable_text

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


class _Model(Protocol):
    def model_dump_json(self) -> str: ...

    def model_dump(self, *, mode: str) -> Any: ...


def model_json(model: _Model) -> str:
    """The model's JSON, as pydantic writes it; or, where a string in it holds what UTF-8 cannot
    encode (a lone surrogate, stored before runs' text was made storable, or written to the
    store by hand), the same with each such character escaped (storable_text), not a 500."""
    try:
        return model.model_dump_json()
    except ValueError:  # pydantic's PydanticSerializationError: UnicodeEncodeError within
        plain = encodable(model.model_dump(mode="json"))
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))


def encodable(value: Any) -> Any:
    """A copy of a JSON-ready value with its strings and keys made storable_text."""
    if isinstance(value, dict):
        return {storable_text(str(k)): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(item) for item in value]
    return storable_text(value) if isinstance(value, str) else value
