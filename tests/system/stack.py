"""The real stack for system tests: daemons in processes of their own on a store (FerretDB, on its
PostgreSQL handler, or PostgreSQL itself: tests/system/databases.py), Redis and Kafka, the
services stopped and started under them, and what the store says ran.

Each test gets a database, a topic and job ids nobody else uses, and removes them afterwards.
Every wait is bounded. A service stopped by a test is started again on the way out, whatever
happened, since the tests after it need it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families
from pymongo.errors import PyMongoError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from tests.fixtures.services import KAFKA_URL, REDIS_URL, service_missing
from tests.system.databases import Database, StoreKind, database, with_path
from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.domains import DEFAULT_DOMAIN
from tickd.scheduler.events.kafka_settings import KafkaSettings
from tickd.scheduler.model import (
    CronSchedule,
    Execution,
    Job,
    Misfire,
    MisfirePolicy,
    OnceSchedule,
)
from tickd.scheduler.ports.backends import Store, StoreError
from tickd.scheduler.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services.sh"
EVERY_SECOND = "* * * * * *"
KAFKA_BOOTSTRAP = KafkaSettings.from_url(KAFKA_URL).bootstrap_servers
# Prints a line in the test's output.
Report = Callable[[str], None]

# Bounds of the waits (seconds).
DAEMON_READY_WITHIN = 20.0
DAEMON_STOP_WITHIN = 30.0
SERVICE_ACTION_WITHIN = 150.0  # a start may have to wait for Kafka (90 s at worst in the script)
HTTP_WITHIN = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def next_whole_second(after: datetime, seconds_ahead: float) -> datetime:
    at = after + timedelta(seconds=seconds_ahead)
    return at.replace(microsecond=0) + timedelta(seconds=1)


# -- the services -------------------------------------------------------------------------------


async def require_services(store: Database) -> None:
    """Skip (fail under TICKD_REQUIRE_SERVICES=1) unless the store (FerretDB or PostgreSQL),
    Redis and Kafka all answer."""
    await store.require()
    redis = Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
    try:
        await redis.ping()
    except (RedisError, OSError) as exc:
        service_missing(f"Redis is not reachable at {REDIS_URL}: {exc}")
    finally:
        await redis.aclose()
    try:
        await asyncio.to_thread(kafka_admin().list_topics, timeout=5)
    except KafkaException as exc:
        service_missing(f"Kafka is not reachable at {KAFKA_BOOTSTRAP}: {exc}")


def kafka_admin() -> AdminClient:
    return AdminClient({"bootstrap.servers": KAFKA_BOOTSTRAP, "log_level": 0})


async def services(action: str, name: str) -> float:
    """`scripts/services.sh <action> <name>`; returns how long it took. A start waits until the
    service answers its protocol (the script checks)."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        str(SERVICES),
        action,
        name,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(SERVICE_ACTION_WITHIN):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    if process.returncode != 0:
        raise RuntimeError(f"services.sh {action} {name} failed:\n{output.decode()[-3000:]}")
    return time.monotonic() - started


def service_pid(name: str) -> int | None:
    """The pid services.sh recorded for `name` if that process runs (None: the script did not
    start it, so it cannot stop it either)."""
    run_dir = Path(os.environ.get("TICKD_SERVICES_DIR", "/tmp/tickd-services")) / "run"
    try:
        pid = int((run_dir / f"{name}.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


@contextlib.asynccontextmanager
async def outage(name: str) -> AsyncIterator[Outage]:
    """The service stopped for the body of the block; started again on the way out, even when
    the body fails. Yields when it stopped and, once out, when it was back."""
    if service_pid(name) is None:
        service_missing(f"{name} was not started by scripts/services.sh, so a test cannot stop it")
    down = Outage(name)
    try:
        await services("stop", name)
        down.stopped_at = datetime.now(UTC)
        yield down
    finally:
        down.restarting_at = datetime.now(UTC)
        await services("start", name)
        down.back_at = datetime.now(UTC)


@dataclass
class Outage:
    name: str
    stopped_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    restarting_at: datetime | None = None
    back_at: datetime | None = None


# -- a test's own corner of the stack -------------------------------------------------------------


@dataclass
class Sandbox:
    """A database on the chosen store, a topic and a key space of one test; `clean()` removes
    them."""

    kind: StoreKind = "ferretdb"
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    job_ids: list[str] = field(default_factory=list)
    db: Database = field(init=False, repr=False)
    # One client for the whole test (see store()).
    _store: Store | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.db = database(self.kind, f"tickd_sys_{self.tag}")

    @property
    def topic(self) -> str:
        return f"tickd-sys-{self.tag}"

    @property
    def store_url(self) -> str:
        return self.db.store_url

    def events_url(self, **options: int) -> str:
        url = with_path(KAFKA_URL, self.topic)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"{url}?{query}" if query else url

    @contextlib.asynccontextmanager
    async def store(self) -> AsyncIterator[Store]:
        """The test's store, its database made and one client opened on first use and closed
        by clean(). A client opened and closed at each poll of a test races its own monitor's
        connection hundreds of times a test, and pymongo leaks the transport of a connection it
        was opening when closed (its ResourceWarning then fails whichever test the collector
        runs in)."""
        if self._store is None:
            await self.db.create()
            store = open_store(self.store_url)
            await store.open()
            self._store = store
        yield self._store

    async def add_jobs(self, jobs: Sequence[Job]) -> None:
        async with self.store() as store:
            inserted = await store.insert_missing_jobs(jobs)
        assert len(inserted) == len(jobs)
        self.job_ids += [job.id for job in jobs]

    async def put_domains(self, *settings: DomainSettings) -> None:
        """Domains' settings stored, as `tickd domains set` stores them."""
        async with self.store() as store:
            for one in settings:
                await store.put_domain(one)

    async def clean(self) -> None:
        """Best effort, each part on its own: a service a test left down must not hide the rest."""
        if self._store is not None:
            with contextlib.suppress(StoreError):
                await self._store.close()
            self._store = None
        with contextlib.suppress(PyMongoError, asyncpg.PostgresError, OSError, TimeoutError):
            await self.db.drop()
        with contextlib.suppress(RedisError, OSError):
            redis = Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=5)
            try:
                for start in range(0, len(self.job_ids), 500):
                    keys = [f"job:{job_id}" for job_id in self.job_ids[start : start + 500]]
                    await redis.delete(*keys)
            finally:
                await redis.aclose()
        # A topic never created (nothing published) or slow to go is left to the broker. The
        # admin client must outlive the request: destroying it cancels the deletion.
        kafka = kafka_admin()
        with contextlib.suppress(KafkaException, TimeoutError):
            futures = kafka.delete_topics([self.topic], operation_timeout=20)
            await asyncio.to_thread(futures[self.topic].result, 30)


def every_second_jobs(
    count: int, first: datetime, *, prefix: str, misfire: Misfire | None = None
) -> list[Job]:
    """`count` no-op jobs on `* * * * * *`, first due at `first` (a whole second)."""
    return [
        Job(
            name=f"{prefix}-{i:04}",
            handler="noop",
            schedule=CronSchedule(expr=EVERY_SECOND),
            next_run_at=first,
            # Short, so that a run left behind by an outage is reaped and run again in the test.
            timeout_seconds=5.0,
            misfire=misfire or Misfire(),
        )
        for i in range(count)
    ]


RUN_ALL = Misfire(policy=MisfirePolicy.RUN_ALL)


def sleeping_jobs(
    count: int,
    *,
    prefix: str,
    seconds: float,
    once_at: datetime | None = None,
    cron: str = EVERY_SECOND,
    first: datetime | None = None,
    timeout_seconds: float = 600.0,
    domain: str = DEFAULT_DOMAIN,
) -> list[Job]:
    """`count` jobs of the `sleep` handler in `domain`: one-shot at `once_at`, or else on `cron`
    from `first`.
    The long timeout keeps their leases for ten minutes: a run a crash left behind and run again
    within seconds was given back by the heartbeat, not by its lease running out. One retry: a
    run a crash abandons runs again, rather than end as a dead letter."""
    when = once_at or first
    assert when is not None, "a one-shot time or a first occurrence"
    schedule = OnceSchedule(at=when) if once_at else CronSchedule(expr=cron)
    return [
        Job(
            name=f"{prefix}-{i:04}",
            handler="sleep",
            params={"seconds": seconds},
            schedule=schedule,
            next_run_at=when,
            timeout_seconds=timeout_seconds,
            max_retries=1,
            domain=domain,
        )
        for i in range(count)
    ]


def webhook_jobs(
    count: int,
    first: datetime,
    *,
    prefix: str,
    url: str,
    domain: str,
    timeout_seconds: float,
    misfire: Misfire | None = None,
) -> list[Job]:
    """`count` jobs of the `webhook` handler on `* * * * * *` in `domain`, each calling `url`
    (a GET) and waiting at most `timeout_seconds` for its answer, first due at `first`. No
    retry: an endpoint that does not answer costs each run one wait."""
    return [
        Job(
            name=f"{prefix}-{i:04}",
            handler="webhook",
            params={"url": url, "method": "GET", "timeout_seconds": timeout_seconds},
            schedule=CronSchedule(expr=EVERY_SECOND),
            next_run_at=first,
            # Room past the webhook's own wait: the run ends by the webhook's timeout, not the
            # job's.
            timeout_seconds=timeout_seconds + 5,
            misfire=misfire or Misfire(),
            domain=domain,
        )
        for i in range(count)
    ]


# -- endpoints the daemons' handlers call --------------------------------------------------------


class Endpoints:
    """An HTTP server in the test's process on loopback, one path per name (`url(name)`), each
    answering 200 at once unless told to hang: then a request gets no answer until its caller
    gives up, the endpoint answers again or the server closes. Daemons reach it with
    `http_allow = ["127.0.0.1"]`, as ops allow an internal address."""

    def __init__(self) -> None:
        self.port = 0
        self.calls: Counter[str] = Counter()
        self._hanging: dict[str, asyncio.Event] = {}  # set: released
        self._runner: web.AppRunner | None = None

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def hang(self, name: str) -> None:
        self._hanging.setdefault(name, asyncio.Event())

    def answer(self, name: str) -> None:
        """Answer at once again, the requests left hanging too."""
        released = self._hanging.pop(name, None)
        if released is not None:
            released.set()

    async def _answer(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.calls[name] += 1
        released = self._hanging.get(name)
        if released is not None:
            await released.wait()
        return web.Response(text="ok")

    async def __aenter__(self) -> Endpoints:
        app = web.Application()
        app.router.add_get("/{name}", self._answer)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        for name in list(self._hanging):
            self.answer(name)
        if self._runner is not None:
            await self._runner.cleanup()


# -- daemons -------------------------------------------------------------------------------------


@dataclass
class Daemon:
    """`python -m tickd --config <file> run` in a process of its own, its log in a file."""

    name: str
    port: int
    log_path: Path
    process: asyncio.subprocess.Process

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    async def get(self, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_WITHIN)) as http,
            http.get(f"http://127.0.0.1:{self.port}{path}") as response,
        ):
            return response.status, await response.text()

    async def ready(self) -> tuple[int, dict[str, Any]]:
        status, body = await self.get("/readyz")
        answer: dict[str, Any] = json.loads(body)
        return status, answer

    async def metrics(self) -> dict[str, float]:
        """Every sample as `name{label="value",...}` -> value (labels sorted by name)."""
        status, body = await self.get("/metrics")
        assert status == 200, body
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    async def wait_ready(self, within: float = DAEMON_READY_WITHIN) -> None:
        deadline = time.monotonic() + within
        while True:
            if not self.alive:
                raise AssertionError(f"{self.name} exited at startup:\n{self.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                if (await self.ready())[0] == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready after {within} s:\n{self.log_tail()}")
            await asyncio.sleep(0.2)

    async def log_tasks(self) -> None:
        """SIGUSR1: the daemon logs where each of its tasks and threads waits."""
        if self.alive:
            self.process.send_signal(signal.SIGUSR1)
            await asyncio.sleep(0.5)  # it logs at its loop's next turn

    def where_it_waits(self, lines: int = 15) -> str:
        """Its last log lines before the SIGUSR1 dump, then the dump, each task's and thread's
        innermost waits only: short enough for a CI log that keeps only its end."""
        log = self.log().splitlines()
        dump = [line for line in log if " daemon.task " in line or " daemon.thread " in line]
        dumped = set(dump)
        before = [line for line in log if line not in dumped][-lines:]
        return "\n".join(
            [f"-- {self.name}: its last log lines, then where it waits", *before]
            + [_innermost(line) for line in dump]
        )

    async def stop(self, within: float = DAEMON_STOP_WITHIN) -> int:
        """SIGTERM, then the exit status; killed (and failing) if it does not stop in time."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(within):
                return await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise AssertionError(f"{self.name} ignored SIGTERM for {within} s") from None

    def freeze(self) -> None:
        """SIGSTOP: the process holds still, its writes stop, until thaw() or kill()."""
        if self.alive:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGCONT)

    async def kill(self) -> None:
        if self.alive:
            self.process.kill()
        await self.process.wait()


async def start_daemon(
    name: str,
    sandbox: Sandbox,
    workdir: Path,
    *,
    events_url: str | None = None,
    mail_url: str | None = None,
    store_url: str | None = None,
    **settings: Any,
) -> Daemon:
    port = free_port()
    config = workdir / f"{name}.toml"
    values = {
        "shutdown_grace_seconds": 5,
        # With the jobs' 5 s timeout: a run an outage left behind is reaped 8 s after its claim.
        "lease_margin_seconds": 3,
        "log_level": "INFO",
        "log_format": "text",  # events_closed() reads the text form
        **settings,
    }
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items()))
    env = {
        **os.environ,
        "TICKD_INSTANCE_ID": f"{name}-{sandbox.tag}",
        "TICKD_STORE_URL": store_url or sandbox.store_url,
        "TICKD_LOCK_URL": REDIS_URL,
        "TICKD_EVENTS_URL": events_url or sandbox.events_url(),
        "TICKD_MAIL_URL": mail_url or f"outbox://{workdir}/outbox-{name}",
        "TICKD_API_PORT": str(port),
        **sandbox.db.daemon_env(workdir, name),
    }
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tickd",
            "--config",
            str(config),
            "run",
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    return Daemon(name, port, log_path, process)


def _innermost(dump_line: str, links: int = 3) -> str:
    """A `daemon.task` or `daemon.thread` line cut to its name and its innermost `links` waits,
    outermost first, each path from the package it is in."""
    name = re.search(r" (?:task|thread)=(\S+)", dump_line)
    chain = re.search(r' (?:waits_at|at)="?([^"]*)', dump_line)
    if name is None or chain is None:
        return f"  {dump_line}"
    task = " daemon.task " in dump_line
    parts = chain[1].split(" > ") if task else chain[1].split(" < ")[::-1]
    short = [part.split("site-packages/")[-1].split(f"{ROOT}/")[-1] for part in parts[-links:]]
    return f"  {'task' if task else 'thread'} {name[1]}: {' > '.join(short)}"


@contextlib.asynccontextmanager
async def daemons(
    sandbox: Sandbox, workdir: Path, names: Iterable[str], **settings: Any
) -> AsyncIterator[list[Daemon]]:
    """Daemons started and ready; killed on the way out if the test did not stop them."""
    started: list[Daemon] = []
    # The collections and their indexes first: two daemons opening one new database at once on
    # FerretDB 1.24 race to create its indexes, and the loser's connection is dropped.
    async with sandbox.store():
        pass
    try:
        started += [await start_daemon(name, sandbox, workdir, **settings) for name in names]
        for daemon in started:
            await daemon.wait_ready()
        yield started
    except BaseException as failure:
        # A failed test leaves each live daemon's tasks and threads in its log and its report:
        # where a stuck one waits.
        for daemon in started:
            await daemon.log_tasks()
        if isinstance(failure, Exception):
            for daemon in started:
                failure.add_note(daemon.where_it_waits())
        raise
    finally:
        for daemon in started:
            await daemon.kill()


# -- what ran ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    job_id: str
    scheduled_at: datetime
    started_at: datetime
    status: str
    owner: str
    finished_at: datetime | None = None  # None while running


async def executions(sandbox: Sandbox, *, handler: str | None = None) -> list[Execution]:
    """Every execution of the sandbox (of `handler`'s jobs), as its store has them."""
    async with sandbox.store() as store:
        return await sandbox.db.executions(store, handler=handler)


async def runs_in(sandbox: Sandbox) -> list[Run]:
    """Every execution of the sandbox, straight from its store."""
    return [run_of(execution) for execution in await executions(sandbox)]


def run_of(execution: Execution) -> Run:
    # A daemon records every execution with its start and its instance, a skipped one too.
    assert execution.started_at is not None and execution.owner is not None, execution
    return Run(
        job_id=execution.job_id,
        scheduled_at=execution.scheduled_at,
        started_at=execution.started_at,
        status=str(execution.status),
        owner=execution.owner,
        finished_at=execution.finished_at,
    )


async def statuses(sandbox: Sandbox, handler: str) -> Counter[str]:
    """How many executions of the sandbox's jobs of `handler` are in each status."""
    async with sandbox.store() as store:
        return await sandbox.db.statuses(store, handler)


async def held_leases(sandbox: Sandbox) -> int:
    """Jobs of the sandbox whose lease is held."""
    async with sandbox.store() as store:
        return await sandbox.db.held_leases(store)


async def unsent_before(sandbox: Sandbox, when: datetime) -> int:
    """Events in the outbox written before `when` and not yet sent."""
    async with sandbox.store() as store:
        return await sandbox.db.unsent_before(store, when)


async def next_runs(sandbox: Sandbox) -> dict[str, datetime]:
    ours = set(sandbox.job_ids)
    async with sandbox.store() as store:
        jobs = await sandbox.db.jobs(store)
    return {
        job.id: job.next_run_at for job in jobs if job.id in ours and job.next_run_at is not None
    }


@dataclass
class Tally:
    """Executions checked against the occurrences that fell due: each exactly once, none skipped.

    For each job, the occurrences from `first` on that have a completed (`success`) run must be a
    gapless run of seconds, none twice, reaching at least `due_until`; past that, occurrences are
    allowed to be in flight (not yet run) at the stop. `abandoned` executions (a run given back
    by an outage, never started) are counted, not held against the job, as long as their
    occurrence then ran once.
    """

    jobs: int
    first: datetime
    due_until: datetime
    runs: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    by_owner: Counter[str] = field(default_factory=Counter)
    duplicates: list[tuple[str, datetime]] = field(default_factory=list)
    missed: list[tuple[str, datetime]] = field(default_factory=list)
    wrong_next: list[str] = field(default_factory=list)
    beyond: int = 0  # occurrences run after due_until (in flight at the stop, and run)
    expected: int = 0  # occurrences from first to due_until, every job

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missed or self.wrong_next)

    def summary(self) -> str:
        return (
            f"{self.jobs} jobs, {self.expected} occurrences due from the first to "
            f"{self.due_until:%H:%M:%S}: {len(self.missed)} missed, {len(self.duplicates)} run "
            f"twice; {self.beyond} later ones run too; executions {dict(self.by_status)}, "
            f"by instance {dict(self.by_owner)}"
        )


def tally(
    job_ids: Sequence[str],
    runs: Sequence[Run],
    next_run_at: dict[str, datetime],
    *,
    first: datetime,
    due_until: datetime,
) -> Tally:
    ours = set(job_ids)  # not the system jobs the daemons seed
    runs = [run for run in runs if run.job_id in ours]
    result = Tally(jobs=len(job_ids), first=first, due_until=due_until, runs=len(runs))
    done: dict[str, Counter[datetime]] = defaultdict(Counter)
    for run in runs:
        result.by_status[run.status] += 1
        result.by_owner[run.owner.rsplit("-", 1)[0]] += 1
        if run.status == "success":
            done[run.job_id][run.scheduled_at] += 1
    window = int((due_until - first).total_seconds()) + 1
    result.expected = window * len(job_ids)
    for job_id in job_ids:
        ran = done[job_id]
        result.duplicates += [(job_id, at) for at, n in ran.items() if n > 1]
        last = max(ran, default=first - timedelta(seconds=1))
        span = int((last - first).total_seconds()) + 1
        due = [first + timedelta(seconds=i) for i in range(max(span, window))]
        result.missed += [(job_id, at) for at in due if at not in ran]
        result.beyond += sum(1 for at in ran if at > due_until)
        # The job's schedule goes on right after its last run: nothing was stepped over.
        if next_run_at.get(job_id) != last + timedelta(seconds=1):
            result.wrong_next.append(job_id)
    return result


def by_job(runs: list[Run]) -> dict[str, list[Run]]:
    grouped: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        grouped[run.job_id].append(run)
    for job_runs in grouped.values():
        job_runs.sort(key=lambda run: run.started_at)
    return grouped


async def partition_shares(sandbox: Sandbox) -> dict[str, int]:
    """How many partitions each daemon (by name) holds."""
    async with sandbox.store() as store:
        owners = await store.partition_owners()
    return dict(Counter((o.owner or "nobody").split("-")[0] for o in owners))


async def holds_all(sandbox: Sandbox, daemon: Daemon) -> bool:
    return await partition_shares(sandbox) == {daemon.name: 64}


def occurrences_due(
    jobs: Iterable[str], first: datetime, *, every: int, until: datetime
) -> set[tuple[str, datetime]]:
    """Each job's occurrences every `every` seconds from `first`, those due 10 s or more before
    `until` (the later ones may still be in flight when the daemons stop)."""
    return {
        (job, at)
        for job in jobs
        for at in (first + timedelta(seconds=every * i) for i in range(100))
        if at <= until - timedelta(seconds=10)
    }


def overlaps(job_runs: list[Run]) -> list[tuple[Run, Run]]:
    """Runs of one job (sorted by start) that started before the previous one ended."""
    return [
        (before, after)
        for before, after in itertools.pairwise(job_runs)
        if before.finished_at is None or after.started_at < before.finished_at
    ]


# -- waiting and reading -------------------------------------------------------------------------


async def eventually(what: str, check: Callable[[], Awaitable[bool]], *, within: float) -> float:
    """Poll `check` until it holds; fails naming `what` after `within` seconds. Returns how long
    it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > within:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.5)
    return time.monotonic() - started


async def alive_until(when: datetime, running: Sequence[Daemon]) -> None:
    """Wait until `when`, failing at once (with its log) if a daemon exits meanwhile."""
    while (left := (when - datetime.now(UTC)).total_seconds()) > 0:
        for daemon in running:
            if not daemon.alive:
                raise AssertionError(
                    f"{daemon.name} exited with {daemon.process.returncode}:\n{daemon.log_tail()}"
                )
        await asyncio.sleep(min(0.5, left))


def events_closed(log: str) -> dict[str, int]:
    """The publisher's final counts, from its `events.closed` line at shutdown."""
    lines = [line for line in log.splitlines() if " events.closed " in line]
    assert lines, "no events.closed line: the publisher was not closed"
    fields = dict(part.split("=", 1) for part in lines[-1].split(" events.closed ", 1)[1].split())
    return {name: int(value) for name, value in fields.items()}


def topic_size(topic: str) -> int:
    """Messages in the topic's only partition (its high watermark)."""
    consumer = Consumer(
        {"bootstrap.servers": KAFKA_BOOTSTRAP, "group.id": f"tickd-sys-{uuid.uuid4().hex}"}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(high)
    finally:
        consumer.close()


async def drain_outbox(sandbox: Sandbox, workdir: Path, events_url: str) -> None:
    """A daemon of its own relays what stopped daemons left in the outbox, then stops. The
    sandbox's jobs are paused first, so that it runs nothing and adds no event of its own."""
    async with sandbox.store() as store:
        await sandbox.db.pause_jobs(store)
    async with daemons(sandbox, workdir, ["relay"], events_url=events_url) as relaying:

        async def outbox_empty() -> bool:
            async with sandbox.store() as store:
                return (await store.outbox_backlog()).unsent == 0

        await eventually("the outbox is empty", outbox_empty, within=90)
        codes = await asyncio.gather(*(daemon.stop() for daemon in relaying))
        assert codes == [0], relaying[0].log_tail()


async def events_delivered(sandbox: Sandbox, workdir: Path, events_url: str) -> tuple[int, int]:
    """(events expected, of them in the topic), once what stopped daemons left in the outbox has
    been relayed: one event per state of each execution of the sandbox."""
    await drain_outbox(sandbox, workdir, events_url)
    expected = await expected_event_ids(sandbox)
    in_topic = set(await asyncio.to_thread(topic_event_ids, sandbox.topic))
    return len(expected), len(expected & in_topic)


def topic_event_ids(topic: str) -> list[str]:
    """The `id` of every event in the topic's only partition, from the start, in order."""
    consumer = Consumer(
        {
            "bootstrap.servers": KAFKA_BOOTSTRAP,
            "group.id": f"tickd-sys-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        ids: list[str] = []
        deadline = time.monotonic() + 60
        while len(ids) < high and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=500, timeout=1.0)
            ids += [json.loads(m.value() or b"{}")["id"] for m in messages if m.error() is None]
        return ids
    finally:
        consumer.close()


async def expected_event_ids(sandbox: Sandbox) -> set[str]:
    """One event per state each execution went through: `running` when recorded, and its
    final status (a skipped occurrence is recorded skipped at once)."""
    found = await executions(sandbox)
    expected = {f"{execution.id}:{execution.status}" for execution in found}
    return expected | {f"{e.id}:running" for e in found if e.status != "skipped"}


def lag_seconds(runs: Iterable[Run]) -> list[float]:
    return sorted((run.started_at - run.scheduled_at).total_seconds() for run in runs)


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(len(values) * fraction))]
