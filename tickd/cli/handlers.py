"""`tickd handlers`: the handlers this install registers (`--json`: as JSON), and `tickd handlers
run NAME`, which runs one of them once, here, without a daemon: as `tickd.testing.run_handler`
runs it (params checked against its schema, its result as an execution records it), on
throwaway backends, its declared resources opened for the run. It prints the result, the lines
the handler logged and how long it took; exit 1 when the run fails, 2 for params refused."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from tickd.cli.output import duration_text, print_json
from tickd.scheduler.config.settings import Settings
from tickd.scheduler.model import ValidationError
from tickd.scheduler.plugin.api import Handler, Resource, ResourceEnv
from tickd.scheduler.plugin.registry import HandlerRegistry, RegistryError
from tickd.testing import HandlerRun, run_handler


class BadParams(Exception):
    """A --param or --params-json that is not what it must be: says which."""


def handlers_command(args: argparse.Namespace, settings: Settings) -> int:
    from tickd.app import load_registry

    try:
        registry = load_registry()
    except RegistryError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "action", None) == "run":
        return run_once(registry, settings, args)
    return list_installed(registry, as_json=args.json)


def list_installed(registry: HandlerRegistry, *, as_json: bool) -> int:
    if as_json:
        print_json({"items": [_described(r.name, r.handler, r.origin) for r in registry]})
        return 0
    for registered in registry:  # one line each, tab-separated: what scripts read
        print(f"{registered.name}\t{registered.origin}")
    return 0


def _described(name: str, handler: Handler, origin: str) -> dict[str, Any]:
    """As GET /v1/handlers describes a handler."""
    return {
        "name": name,
        "origin": origin,
        "params_schema": dict(handler.params_schema) if handler.params_schema else None,
        "secret_params": sorted(handler.secret_params),
        "max_concurrency": handler.max_concurrency,
    }


def run_once(registry: HandlerRegistry, settings: Settings, args: argparse.Namespace) -> int:
    registered = registry.get(args.name)
    if registered is None:
        known = ", ".join(r.name for r in registry) or "none"
        print(
            f"tickd handlers run: no handler named {args.name!r} is installed (installed: {known})",
            file=sys.stderr,
        )
        return 2
    try:
        params = params_given(args.params_json, args.param)
        run = asyncio.run(_run(registered.name, registered.handler, params, settings, args))
    except (BadParams, ValidationError) as exc:
        print(f"tickd handlers run: {exc}", file=sys.stderr)
        return 2
    print_run(run, as_json=args.json)
    return 0 if run.succeeded else 1


def params_given(params_json: str | None, pairs: list[str]) -> dict[str, Any]:
    """--params-json's object, with each --param KEY=VALUE on top (VALUE read as JSON when it
    is JSON, else as a string)."""
    params: dict[str, Any] = {}
    if params_json is not None:
        try:
            params = json.loads(params_json)
        except ValueError as exc:
            raise BadParams(f"--params-json: not JSON: {exc}") from None
        if not isinstance(params, dict):
            raise BadParams("--params-json: the params must be a JSON object")
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise BadParams(f"--param {pair!r}: expected KEY=VALUE")
        params[key] = _json_or_text(raw)
    return params


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def _run(
    name: str,
    handler: Handler,
    params: Mapping[str, Any],
    settings: Settings,
    args: argparse.Namespace,
) -> HandlerRun:
    # The run's lines are printed with its result, not a second time by the root logger.
    lines = logging.getLogger("tickd.handler")
    propagates, lines.propagate = lines.propagate, False
    try:
        async with _resources_of(handler, settings) as resources:
            return await run_handler(
                handler,
                params=params,
                name=name,
                timeout_seconds=args.timeout,
                http_allow=settings.http_allow,
                http_ports=settings.http_allowed_ports,
                config=settings.handler_settings.get(name, {}),
                resources=resources,
            )
    finally:
        lines.propagate = propagates


@asynccontextmanager
async def _resources_of(
    handler: Handler, settings: Settings
) -> AsyncIterator[dict[Resource[Any], object]]:
    """The resources the handler declares, opened for this run on a throwaway store (or at
    their [resource_urls]), closed after it."""
    with tempfile.TemporaryDirectory(prefix="tickd-handler-run-") as folder:
        env = ResourceEnv(store_url=f"sqlite:///{folder}/tickd.db", urls=settings.resource_urls)
        async with AsyncExitStack() as stack:
            opened = {r: await stack.enter_async_context(r.open(env)) for r in handler.resources}
            yield opened


def print_run(run: HandlerRun, *, as_json: bool) -> None:
    error = run.error
    if as_json:
        print_json(
            {
                "status": str(run.status),
                "result": run.result,
                "error": {"type": error.type, "message": error.message} if error else None,
                "logs": run.logs,
                "duration_seconds": run.duration_seconds,
            }
        )
    else:
        print(f"status    {run.status}")
        print(f"duration  {duration_text(run.duration_seconds)}")
        if run.result is not None:
            print(f"result    {json.dumps(run.result, ensure_ascii=False)}")
        for line in run.logs:
            print(f"log       {line}")
    if error is not None:
        print(f"tickd: the run failed: {error.type}: {error.message}", file=sys.stderr)
