"""Handlers by name: loaded from the `tickd.handlers` entry-point group, or registered in code.

One audited loader records which distribution gave each name, so that a duplicate can name both
origins and stop startup: a bad deploy fails in seconds instead of running two handlers under
one name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from tickd.scheduler.plugin.api import Handler, HandlerFunc

ENTRY_POINT_GROUP = "tickd.handlers"


class RegistryError(Exception):
    pass


@dataclass(frozen=True, kw_only=True)
class Registered:
    name: str
    handler: Handler
    origin: str  # "distribution x.y (module:object)" or "code (module.qualname)"


class HandlerRegistry:
    def __init__(self) -> None:
        self._by_name: dict[str, Registered] = {}

    def register(
        self, name: str, target: Handler | HandlerFunc, *, origin: str | None = None
    ) -> None:
        handler = target if isinstance(target, Handler) else Handler(func=target)
        if not callable(handler.func):
            raise RegistryError(f"handler {name!r} from {origin} is not callable")
        origin = origin or f"code ({_qualname(handler.func)})"
        if name in self._by_name:
            first = self._by_name[name].origin
            raise RegistryError(
                f"duplicate handler name {name!r}: registered by {first} and by {origin}"
            )
        self._by_name[name] = Registered(name=name, handler=handler, origin=origin)

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        for entry_point in _unique(entry_points(group=group)):
            try:
                target = entry_point.load()
            except Exception as exc:
                raise RegistryError(
                    f"handler {entry_point.name!r} from {_origin(entry_point)} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self.register(entry_point.name, target, origin=_origin(entry_point))

    def get(self, name: str) -> Registered | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Registered]:
        return iter(sorted(self._by_name.values(), key=lambda r: r.name))


def _origin(entry_point: EntryPoint) -> str:
    dist = entry_point.dist
    where = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    return f"{where} ({entry_point.value})"


def _unique(found: Iterable[EntryPoint]) -> list[EntryPoint]:
    # An editable install can list one distribution twice on sys.path: the same entry point
    # from the same distribution is one registration, not a duplicate.
    seen: dict[tuple[str, str, str], EntryPoint] = {}
    for ep in found:
        dist = ep.dist.name if ep.dist is not None else ""
        seen.setdefault((ep.name, ep.value, dist), ep)
    return list(seen.values())


def _qualname(func: object) -> str:
    module = getattr(func, "__module__", "?")
    return f"{module}.{getattr(func, '__qualname__', repr(func))}"
