"""`tickd apply` and `tickd diff` against a real API (tests/api/test_cli.py's `live` server), as
ops run them from a shell: jobs as code, matched by name."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.api.conftest import ping
from tests.api.test_cli import Live, serving_live
from tests.conftest import EngineFactory
from tickd.api.models import JobPatch
from tickd.cli import jobs_as_code
from tickd.client import Client
from tickd.handlers.webhook import webhook
from tickd.scheduler.model import Job
from tickd.scheduler.ports.backends import JobQuery

# The `tickd` command in a subprocess, against a real port: left out of `make quick`.
pytestmark = pytest.mark.slow


JOBS_TOML = """
[[jobs]]
name = "nightly-ping"
handler = "ping"
schedule = { kind = "cron", expr = "0 30 2 * * *", timezone = "Europe/Berlin" }
params = { url = "https://example.com/health", api_key = "sk-live-secret" }
max_retries = 2

[[jobs]]
name = "often-ping"
handler = "ping"
schedule = { kind = "interval", every_seconds = 300 }
params = { url = "https://example.com/often" }
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


async def jobs_by_name(live: Live) -> dict[str, Job]:
    return {job.name: job for job in await live.store.list_jobs(JobQuery())}


async def test_apply_creates_the_jobs_and_a_second_apply_changes_nothing(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)

    first = await live.tickd("apply", "-f", str(jobs_file))

    assert first.code == 0, first.err
    created = await jobs_by_name(live)
    assert set(created) == {"nightly-ping", "often-ping"}
    assert created["nightly-ping"].params["api_key"] == "sk-live-secret"
    assert {job.managed_by for job in created.values()} == {f"file:{jobs_file}"}
    # Again: the secret, shown masked by the API, is no change; no write, no new revision.
    second = await live.tickd("apply", "-f", str(jobs_file))
    assert second.code == 0, second.err
    assert "0 changed, 0 failed, 2 unchanged." in second.out
    after = await jobs_by_name(live)
    assert {n: j.revision for n, j in after.items()} == {n: j.revision for n, j in created.items()}
    history = await live.get(f"/v1/jobs/{created['nightly-ping'].id}/history")
    assert [change["action"] for change in history["items"]] == ["create"]
    assert "sk-live-secret" not in first.out + second.out


async def test_diff_shows_each_changed_field_and_apply_updates_only_those(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    before = await jobs_by_name(live)
    write(tmp_path, "jobs.toml", JOBS_TOML.replace("max_retries = 2", "max_retries = 4"))

    diff = await live.tickd("diff", "-f", str(jobs_file))
    dry = await live.tickd("apply", "--dry-run", "-f", str(jobs_file))

    assert diff.code == 3 and dry.code == 3
    assert diff.out.splitlines()[:2] == ["~ update nightly-ping", "    max_retries: 2 -> 4"]
    assert dry.out == diff.out
    as_json = await live.tickd("diff", "--json", "-f", str(jobs_file))
    assert as_json.code == 3 and json.loads(as_json.out) == {
        "changes": [
            {
                "action": "update",
                "name": "nightly-ping",
                "fields": {"max_retries": {"from": 2, "to": 4}},
            }
        ],
        "unchanged": 1,
    }
    assert (await jobs_by_name(live))["nightly-ping"].revision == before["nightly-ping"].revision
    applied = await live.tickd("apply", "-f", str(jobs_file))
    assert applied.code == 0, applied.err
    assert applied.out.splitlines()[0] == "updated nightly-ping (max_retries)"
    after = await jobs_by_name(live)
    assert after["nightly-ping"].max_retries == 4
    assert after["nightly-ping"].revision == before["nightly-ping"].revision + 1
    assert after["nightly-ping"].params["api_key"] == "sk-live-secret"
    assert after["often-ping"].revision == before["often-ping"].revision
    assert (await live.tickd("diff", "-f", str(jobs_file))).code == 0


async def test_a_change_made_meanwhile_is_refused_and_reported_not_overwritten(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    write(tmp_path, "jobs.toml", JOBS_TOML.replace("max_retries = 2", "max_retries = 4"))
    client = Client(live.url, token=live_token())
    definitions = jobs_as_code.load_definitions([str(jobs_file)])
    changes = await asyncio.to_thread(
        jobs_as_code.plan, client, definitions, owner=None, prune=False
    )
    job = (await jobs_by_name(live))["nightly-ping"]
    # Someone changes the job between the plan's read and its write.
    await asyncio.to_thread(client.patch_job, job.id, JobPatch(timeout_seconds=45))

    outcomes = await asyncio.to_thread(jobs_as_code.apply, client, changes)
    await asyncio.to_thread(client.close)

    assert [o.change.name for o in outcomes] == ["nightly-ping"]
    assert outcomes[0].error is not None and "changed meanwhile" in outcomes[0].error
    kept = (await jobs_by_name(live))["nightly-ping"]
    assert (kept.max_retries, kept.timeout_seconds) == (2, 45)


async def test_the_command_exits_1_on_a_job_another_owner_manages_and_changes_nothing(
    live: Live, tmp_path: Path
) -> None:
    other = write(tmp_path, "other.toml", JOBS_TOML)
    assert (await live.tickd("apply", "--owner", "team-b", "-f", str(other))).code == 0
    before = await jobs_by_name(live)
    write(tmp_path, "other.toml", JOBS_TOML.replace("max_retries = 2", "max_retries = 4"))

    run = await live.tickd("apply", "-f", str(other))

    assert run.code == 1
    owner = f"file:{other}"
    taken = "not taken over (--adopt takes it, or apply as --owner team-b)"
    assert run.err.splitlines() == [
        f"tickd: conflict nightly-ping: managed by 'team-b', not {owner!r}: {taken}",
        f"tickd: conflict often-ping: managed by 'team-b', not {owner!r}: {taken}",
        "tickd: nothing applied: 2 jobs are not this file's to change",
    ]
    after = await jobs_by_name(live)
    assert {n: j.revision for n, j in after.items()} == {n: j.revision for n, j in before.items()}


async def test_prune_without_owner_never_deletes_the_jobs_of_another_file(
    live: Live, tmp_path: Path
) -> None:
    first = write(tmp_path, "first.toml", JOBS_TOML)
    second = write(
        tmp_path,
        "second.toml",
        '[[jobs]]\nname = "second-noop"\nhandler = "ping"\n'
        'schedule = { kind = "interval", every_seconds = 60 }\n'
        'params = { url = "https://example.com/second" }\n',
    )
    assert (await live.tickd("apply", "-f", str(first))).code == 0

    pruned = await live.tickd("apply", "--prune", "-f", str(second))

    assert pruned.code == 0, pruned.err
    assert pruned.out.splitlines()[0] == "created second-noop"
    jobs = await jobs_by_name(live)
    assert set(jobs) == {"nightly-ping", "often-ping", "second-noop"}
    assert jobs["second-noop"].managed_by == f"file:{second}"
    assert jobs["often-ping"].managed_by == f"file:{first}"


async def test_a_hand_made_job_is_taken_over_only_with_adopt_and_the_refusal_changes_nothing(
    live: Live, tmp_path: Path
) -> None:
    by_hand = await live.tickd(
        "jobs", "create", "--name", "nightly-ping", "--handler", "ping", "--every", "60",
        "--param", "url=https://example.com/x",
    )  # fmt: skip
    assert by_hand.code == 0, by_hand.err
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)
    made = (await jobs_by_name(live))["nightly-ping"]

    refused = await live.tickd("apply", "-f", str(jobs_file))
    dry = await live.tickd("diff", "-f", str(jobs_file))

    assert refused.code == 1
    assert refused.err.splitlines() == [
        "tickd: conflict nightly-ping: made by hand (no owner): not taken over (--adopt takes it)",
        "tickd: nothing applied: 1 job is not this file's to change",
    ]
    assert set(await jobs_by_name(live)) == {"nightly-ping"}
    assert (await jobs_by_name(live))["nightly-ping"].revision == made.revision
    assert dry.code == 1 and dry.out.splitlines()[0] == "! conflict nightly-ping"
    adopted = await live.tickd("apply", "--adopt", "-f", str(jobs_file))
    assert adopted.code == 0, adopted.err
    jobs = await jobs_by_name(live)
    assert jobs["nightly-ping"].managed_by == f"file:{jobs_file}"
    assert jobs["nightly-ping"].max_retries == 2


async def test_a_system_job_is_never_taken_over_or_pruned_even_with_adopt(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    stored = (await jobs_by_name(live))["often-ping"]
    # tickd's own job, as seeding makes them, under the name a file uses.
    await live.store.delete_job(stored.id)
    await live.store.insert_job(replace(stored, system=True))
    owned_system = (await jobs_by_name(live))["often-ping"]
    write(tmp_path, "jobs.toml", JOBS_TOML.replace("max_retries = 2", "max_retries = 3"))
    without = write(tmp_path, "without.toml", JOBS_TOML.split("[[jobs]]")[1].join(["[[jobs]]", ""]))

    adopt = await live.tickd("apply", "--adopt", "-f", str(jobs_file))
    prune = await live.tickd("apply", "--prune", "--owner", f"file:{jobs_file}", "-f", str(without))

    assert adopt.code == 1
    assert adopt.err.splitlines()[0] == (
        "tickd: conflict often-ping: a system job (tickd's own): never taken over"
    )
    assert prune.code == 0, prune.err
    assert "often-ping" not in prune.out
    jobs = await jobs_by_name(live)
    assert jobs["often-ping"].revision == owned_system.revision
    assert jobs["nightly-ping"].max_retries == 2


async def test_prune_deletes_only_the_jobs_an_apply_made_that_the_file_dropped(
    live: Live, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", JOBS_TOML)
    assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
    by_hand = await live.tickd(
        "jobs", "create", "--name", "by-hand", "--handler", "ping", "--every", "60",
        "--param", "url=https://example.com/x",
    )  # fmt: skip
    assert by_hand.code == 0, by_hand.err
    renamed = JOBS_TOML.replace('name = "nightly-ping"', 'name = "nightly-ping-b"')
    renamed = renamed.replace('name = "often-ping"', 'name = "often-ping-b"')
    theirs = write(tmp_path, "theirs.toml", renamed)
    assert "nightly-ping-b" in theirs.read_text()
    assert (await live.tickd("apply", "--owner", "team-b", "-f", str(theirs))).code == 0
    write(tmp_path, "jobs.toml", JOBS_TOML.split("[[jobs]]")[1].join(["[[jobs]]", ""]))
    assert "often-ping" not in jobs_file.read_text()

    without = await live.tickd("apply", "-f", str(jobs_file))
    assert without.code == 0 and len(await jobs_by_name(live)) == 5
    dry = await live.tickd("apply", "--prune", "--dry-run", "-f", str(jobs_file))
    assert dry.code == 3 and dry.out.splitlines()[0] == "- delete often-ping"
    pruned = await live.tickd("apply", "--prune", "-f", str(jobs_file))

    assert pruned.code == 0, pruned.err
    assert "deleted often-ping" in pruned.out.splitlines()
    assert set(await jobs_by_name(live)) == {
        "nightly-ping", "by-hand", "nightly-ping-b", "often-ping-b",
    }  # fmt: skip


async def test_yaml_json_and_a_folder_of_them(live: Live, tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    write(
        folder,
        "a.yaml",
        "jobs:\n  - name: from-yaml\n    handler: ping\n"
        "    schedule: {kind: interval, every_seconds: 60}\n"
        "    params: {url: 'https://example.com/y'}\n    priority: high\n",
    )
    job = {
        "name": "from-json",
        "handler": "ping",
        "schedule": {"kind": "once", "at": "2030-01-01T10:00:00+01:00"},
        "params": {"url": "https://example.com/j"},
    }
    write(folder, "b.json", json.dumps({"jobs": [job]}))
    write(folder, "notes.txt", "not a job file")

    run = await live.tickd("apply", "-f", str(folder))

    assert run.code == 0, run.err
    jobs = await jobs_by_name(live)
    assert set(jobs) == {"from-yaml", "from-json"}
    assert jobs["from-yaml"].priority.name == "HIGH"
    # The API answers 09:00Z for 10:00+01:00: the same instant, no change.
    assert (await live.tickd("diff", "-f", str(folder))).code == 0


async def test_a_file_that_is_no_job_definition_exits_2_naming_the_field(
    live: Live, tmp_path: Path
) -> None:
    bad = write(tmp_path, "bad.toml", JOBS_TOML.replace("max_retries = 2", "max_retries = -1"))
    one = write(tmp_path, "one.toml", JOBS_TOML)
    other = write(tmp_path, "other.toml", JOBS_TOML)

    invalid = await live.tickd("apply", "-f", str(bad))
    duplicate = await live.tickd("diff", "-f", str(one), "-f", str(other))
    missing = await live.tickd("apply", "-f", str(tmp_path / "nope.toml"))
    owner = await live.tickd("apply", "--owner", "team b", "-f", str(one))

    assert invalid.code == 2 and invalid.out == ""
    assert invalid.err.count("\n") == 1
    assert "jobs[0] (nightly-ping): max_retries: " in invalid.err
    assert duplicate.code == 2 and "job 'nightly-ping' is also in" in duplicate.err
    assert missing.code == 2 and "no such file or folder" in missing.err
    assert owner.code == 2 and owner.err.startswith("tickd apply: error: --owner 'team b': ")
    assert await live.store.list_jobs(JobQuery()) == []


def live_token() -> str:
    from tests.api.conftest import ADMIN

    return ADMIN


WEBHOOK_TOML = """
[[jobs]]
name = "vendor-hook"
handler = "webhook"
schedule = { kind = "interval", every_seconds = 300 }
params = { url = "https://api.vendor.com/hook" }
"""


async def test_a_job_the_file_gives_no_key_keeps_the_one_its_handler_gives_it(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    jobs_file = write(tmp_path, "jobs.toml", WEBHOOK_TOML)
    async with serving_live(make_engine, {"webhook": webhook, "ping": ping}) as live:
        assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
        made = (await jobs_by_name(live))["vendor-hook"]
        assert (made.concurrency_key, made.concurrency_limit) == ("endpoint:api.vendor.com", 10)
        assert (await live.tickd("diff", "-f", str(jobs_file))).code == 0
        # Named in the file, the key is compared and applied like any other field.
        write(
            tmp_path,
            "jobs.toml",
            WEBHOOK_TOML + 'concurrency_key = "team:hooks"\n' + "concurrency_limit = 3\n",
        )
        assert (await live.tickd("apply", "-f", str(jobs_file))).code == 0
        changed = (await jobs_by_name(live))["vendor-hook"]
        assert (changed.concurrency_key, changed.concurrency_limit) == ("team:hooks", 3)
        assert (await live.tickd("diff", "-f", str(jobs_file))).code == 0
