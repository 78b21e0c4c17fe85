"""The daemon: open ports and resources, seed, serve the API, run the engine until told to stop."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import contextlib
import errno
import gc
import itertools
import logging
import os
import selectors
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

from aiohttp import web

from tickd.api.listener import GuardedSite, ServerLimits, running
from tickd.app import (
    Resources,
    api_resources,
    build_api,
    build_engine,
    declared_resources,
    log_alert_email_settings,
    opened_ports,
    opened_resources,
    seed_at_boot,
)
from tickd.scheduler.config.settings import ConfigError, Settings
from tickd.scheduler.logs import log_event
from tickd.scheduler.metrics import Metrics
from tickd.scheduler.plugin.forked_children import ChildEndingThreads, end_forked_child
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import Ports
from tickd.scheduler.secrets.masking import scrub_text
from tickd.scheduler.store.kit import StartupAborted
from tickd.scheduler.urls import is_loopback

log = logging.getLogger("tickd.daemon")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A chain of awaits longer than this is cut (a recursion would never end).
MAX_AWAITS_SHOWN = 50
# A thread's innermost frames shown: where it blocks, and what called that.
THREAD_FRAMES_SHOWN = 8
# After the daemon stopped, how long the threads it leaves get to end (its handler threads, idle
# by then, take milliseconds) before those still running are left behind.
THREADS_END_WITHIN_SECONDS = 1.0


async def run_daemon(
    settings: Settings, stop: asyncio.Event, registry: HandlerRegistry, *, dispatcher: bool = True
) -> None:
    """Serve the API and, unless `dispatcher` is False (`tickd api`), run the engine, until
    `stop` is set. One process, one port: /v1, /metrics, /healthz, /readyz."""
    check_exposure(settings)
    await check_port_free(settings)
    log_event(
        log,
        "daemon.starting",
        instance=settings.instance_id,
        dispatcher=dispatcher,
        store=scrub_text(settings.store_url),
        lock=scrub_text(settings.lock_url),
        events=scrub_text(settings.events_url),
        handlers=[r.name for r in registry],
    )
    metrics = Metrics()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(_DefaultThreads(thread_name_prefix="asyncio"))
    leave_the_daemon_in_forked_children(loop)
    log_alert_email_settings(registry, settings)
    # `tickd api` runs no handler: it opens only what the API itself serves from.
    resources = declared_resources(registry) if dispatcher else api_resources(registry)
    try:
        async with (
            opened_ports(settings, metrics, stop=stop) as ports,
            opened_resources(resources, settings, stop) as opened,
        ):
            await _serve_on(ports, opened, settings, stop, registry, metrics, dispatcher=dispatcher)
    except StartupAborted:
        log_event(log, "daemon.stopped_before_start", instance=settings.instance_id)
        return
    finally:
        _daemon["loop"] = None
    log_event(log, "daemon.stopped", instance=settings.instance_id)


async def _serve_on(
    ports: Ports,
    resources: Resources,
    settings: Settings,
    stop: asyncio.Event,
    registry: HandlerRegistry,
    metrics: Metrics,
    *,
    dispatcher: bool,
) -> None:
    engine = None
    if dispatcher:
        engine = build_engine(settings, ports, registry, metrics=metrics, resources=resources)
        await seed_at_boot(ports, registry, settings, resources)
    app = build_api(settings, registry, ports, metrics, engine, resources=resources)
    # What is loaded by now (modules, the app, the handlers) lives as long as the daemon: out of
    # the collector's sight (the garbage of startup collected first), a full collection no
    # longer walks it. Measured in a burst, each took about 40 ms (the loop stalled meanwhile),
    # 5 us a run all told.
    gc.collect()
    gc.freeze()
    await serve(app, settings, stop)


def check_exposure(settings: Settings) -> None:
    """Without tokens anyone who reaches the port may change jobs: loopback only, then."""
    if settings.api_port and not settings.api_tokens and not is_loopback(settings.api_host):
        raise ConfigError(
            "api_host",
            f"{settings.api_host} is reachable from elsewhere and no api_tokens are configured: "
            'set TICKD_API_TOKENS="name:scope:token" (scope read, write or admin; a random '
            "token of 32 characters or more, e.g. from `openssl rand -base64 32`), or listen on "
            "loopback only (TICKD_API_HOST=127.0.0.1)",
        )


async def check_port_free(settings: Settings) -> None:
    """The API's port, tried and let go before anything is opened or seeded: a port that is
    taken stops startup in one line (ConfigError) with the store untouched."""
    if not settings.api_port:
        return
    loop = asyncio.get_running_loop()
    with api_port_refusals(settings):
        server = await loop.create_server(asyncio.Protocol, settings.api_host, settings.api_port)
        server.close()
        await server.wait_closed()


@contextlib.contextmanager
def api_port_refusals(settings: Settings) -> Iterator[None]:
    """A port the system refuses (taken, privileged, an address not of this host) as one line
    naming the setting, the port and where it is set."""
    try:
        yield
    except OSError as exc:
        where = f"{settings.api_port} is in use on {settings.api_host}"
        if exc.errno != errno.EADDRINUSE:
            reason = exc.strerror or type(exc).__name__
            where = f"{settings.api_port} on {settings.api_host} cannot be listened on: {reason}"
        raise ConfigError("api_port", f"{where} (TICKD_API_PORT / api_port)") from None


async def serve(
    app: web.Application,
    settings: Settings,
    stop: asyncio.Event,
    limits: ServerLimits | None = None,
) -> None:
    limits = limits or ServerLimits()
    async with running(app, limits) as runner:
        if settings.api_port:
            site = GuardedSite(runner, settings.api_host, settings.api_port, limits)
            with api_port_refusals(settings):  # taken since check_port_free let it go
                await site.start()
            url = f"http://{settings.api_host}:{settings.api_port}"
            log_event(log, "api.listening", url=url, dashboard=f"{url}/ui", docs=f"{url}/docs")
        await stop.wait()


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGHUP too: a closed terminal or a supervisor's reload sends it, and its default action
    kills the process mid-run, leaving its executions `running` until their leases lapse.
    SIGUSR1 stops nothing: it logs where each task and each thread waits, for a daemon that
    seems stuck."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, _request_stop, stop, sig)
    loop.add_signal_handler(signal.SIGUSR1, log_where_everything_waits)


def log_where_everything_waits() -> None:
    log_waiting_tasks()
    log_waiting_threads()


def log_waiting_tasks() -> None:
    """One line a task: its name and the chain of awaits it is suspended in, outermost first
    (a task's own get_stack shows only its outermost frame)."""
    for task in asyncio.all_tasks():
        log_event(log, "daemon.task", task=task.get_name(), waits_at=" > ".join(awaits(task)))


def awaits(task: asyncio.Task[Any]) -> list[str]:
    """`file:line in function` for each coroutine in the task's chain of awaits."""
    chain: list[str] = []
    step: Any = task.get_coro()
    while step is not None and len(chain) < MAX_AWAITS_SHOWN:
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is None:
            break
        chain.append(place(frame))
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return chain


def log_waiting_threads() -> None:
    """One line a thread: its name and its innermost frames, innermost first. A task can wait
    on a thread (a name lookup, a store's own thread, a handler's) that never comes back."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        chain = " < ".join(frames(frame))
        log_event(log, "daemon.thread", thread=names.get(ident, ident), at=chain)


def frames(frame: FrameType) -> list[str]:
    """`file:line in function` for a frame and its callers, at most THREAD_FRAMES_SHOWN."""
    callers = itertools.islice(traceback.walk_stack(frame), THREAD_FRAMES_SHOWN)
    return [place(caller) for caller, _ in callers]


def place(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    log_event(log, "daemon.stopping", signal=sig.name)
    stop.set()


# -- a handler's forked children -----------------------------------------------------------------
# A handler may fork (os.fork, multiprocessing's fork start method): the child is a copy of the
# daemon, its loop, its store connections and its listening socket included. It runs the
# handler's code only: back in tickd's code it ends (scheduler/plugin/forked_children.py).

# The loop the daemon runs on and its thread, for the hook registered with os.register_at_fork.
_daemon: dict[str, Any] = {}
# The forking thread's signal mask from before the fork (_hold_stop_signals).
_forking = threading.local()


def leave_the_daemon_in_forked_children(loop: asyncio.AbstractEventLoop) -> None:
    """Called at the daemon's start; the hook is registered once per process."""
    if not _daemon:
        os.register_at_fork(
            before=_hold_stop_signals,
            after_in_parent=_release_stop_signals,
            after_in_child=_leave_the_daemon,
        )
    _daemon.update(loop=loop, thread=threading.get_ident(), forked_on_loop=False)


def _hold_stop_signals() -> None:
    """A stop signal sent to the child before it let go of the daemon's handlers (at once, as
    multiprocessing's terminate() may) would reach the daemon: held until it has."""
    if _daemon.get("loop") is not None:
        _forking.held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _release_stop_signals() -> None:
    held = getattr(_forking, "held", None)
    if held is not None:
        _forking.held = None
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _leave_the_daemon() -> None:
    """In a child just forked from a running daemon: what it shares with the daemon is the
    daemon's alone."""
    if _daemon.get("loop") is None:
        return
    try:
        # The pool's threads do not exist in the child; their registry would have its exit
        # join the one thread left, the child's own (multiprocessing's children exit so).
        concurrent.futures.thread._threads_queues.clear()  # type: ignore[attr-defined]
        if _daemon["thread"] == threading.get_ident():
            # Forked on the loop (an async handler): what the loop had queued is the daemon's;
            # its next turn, should the child's code get back to it, ends the child.
            _daemon["forked_on_loop"] = True
            for handle in _daemon["loop"]._ready:
                handle.cancel()
        # The loop's signal plumbing: a signal sent to the child (multiprocessing's
        # terminate()) would end neither process, and wake the daemon's loop to stop it.
        signal.set_wakeup_fd(-1)
        for sig in STOP_SIGNALS:
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, default)
    finally:
        _release_stop_signals()


class _ChildEndingSelector(selectors.DefaultSelector):
    """The daemon loop's selector: waited on by a child forked on the loop, it ends the child."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if _daemon.get("forked_on_loop"):
            end_forked_child(1, reason="back on the daemon's event loop")
        return super().select(timeout)


def daemon_loop() -> asyncio.AbstractEventLoop:
    """The event loop `tickd run` and `tickd api` run on."""
    return asyncio.SelectorEventLoop(_ChildEndingSelector())


# -- threads left running -------------------------------------------------------------------------


class _DefaultThreads(ChildEndingThreads):
    """The loop's default threads (asyncio.to_thread's, run_in_executor(None, ...)'s): a handler
    may fork on one too, and may leave work on one that never ends. The loop's close does not
    wait for that work: end_past_leftover_threads, after it, deals with what is left."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=cancel_futures)


def end_past_leftover_threads(before: set[threading.Thread], code: int) -> None:
    """After the daemon stopped: threads started meanwhile and still running (a handler's own,
    not daemon threads, or a handler still running on the pool past its deadline) would keep
    the process alive, as the interpreter joins them at exit. Given a moment to end, those
    still running are named in the log, and the process ends without them."""
    deadline = time.monotonic() + THREADS_END_WITHIN_SECONDS
    for thread in _threads_since(before):
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [thread.name for thread in _threads_since(before) if thread.is_alive()]
    if not left:
        return
    log_event(log, "daemon.threads_left_running", level=logging.WARNING, threads=left)
    logging.shutdown()  # flushes every log handler
    os._exit(code)


def _threads_since(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and not t.daemon]
