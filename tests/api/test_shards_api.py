"""Sharded jobs through the API: `shards` on a job's definition (validated, ETag'd, in the
OpenAPI document), the shards of an occurrence side by side in the executions lists, and a
failed shard retried alone."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import READ, Api, serving
from tests.conftest import EngineFactory
from tickd.scheduler.plugin.api import HandlerContext, Result

EVERY_MINUTE = {"kind": "cron", "expr": "0 * * * * *"}


async def part(ctx: HandlerContext) -> Result:
    if ctx.params.get("failing_shard") == ctx.shard:
        raise RuntimeError(f"shard {ctx.shard} failed")
    return {"shard": ctx.shard, "of": ctx.shards}


async def plain(ctx: HandlerContext) -> Result:
    return None


async def create(api: Api, **fields: Any) -> dict[str, Any]:
    status, job, _ = await api.call("POST", "/v1/jobs", json={"schedule": EVERY_MINUTE, **fields})
    assert status == 201, job
    assert isinstance(job, dict)
    return job


async def test_shards_are_part_of_a_jobs_definition(make_engine: EngineFactory) -> None:
    async with serving(make_engine, {"part": part}) as api:
        job = await create(api, name="sharded", handler="part", shards=3)
        assert job["shards"] == 3
        plain_job = await create(api, name="plain", handler="part")
        assert plain_job["shards"] == 1, "one shard unless asked"

        path = f"/v1/jobs/{job['id']}"
        _, _, headers = await api.call("GET", path)
        status, changed, new_headers = await api.call(
            "PATCH", path, json={"shards": 5}, headers={"If-Match": headers["etag"]}
        )
        assert (status, changed["shards"]) == (200, 5)
        assert new_headers["etag"] != headers["etag"]
        stale, _, _ = await api.call(
            "PATCH", path, json={"shards": 2}, headers={"If-Match": headers["etag"]}
        )
        assert stale == 412, "a change on a stale read is refused"
        _, history, _ = await api.call("GET", f"{path}/history")
        assert history["items"][0]["changes"] == {"shards": {"from": 3, "to": 5}}

        _, doc, _ = await api.call("GET", "/openapi.json", token=None)
        shards = doc["components"]["schemas"]["JobCreate"]["properties"]["shards"]
        assert (shards["minimum"], shards["maximum"], shards["default"]) == (1, 1000, 1)
        assert "shards" in doc["components"]["schemas"]["JobOut"]["properties"]


async def test_more_shards_than_the_handler_may_run_at_once_are_refused(
    make_engine: EngineFactory,
) -> None:
    async with serving(make_engine, {"part": part}, handler_concurrency={"part": 4}) as api:
        status, body, _ = await api.call(
            "POST",
            "/v1/jobs",
            json={"name": "too-wide", "handler": "part", "schedule": EVERY_MINUTE, "shards": 5},
        )
        assert status == 422, body
        assert [e["field"] for e in body["errors"]] == ["shards"]
        assert "concurrency limit (4)" in body["errors"][0]["reason"]
        _, jobs, _ = await api.call("GET", "/v1/jobs")
        assert jobs["items"] == [], "nothing was written"


async def test_the_executions_list_shows_the_shards_of_an_occurrence_together(
    make_engine: EngineFactory,
) -> None:
    async with serving(make_engine, {"part": part, "plain": plain}) as api:
        sharded = await create(
            api, name="sharded", handler="part", shards=3, params={"failing_shard": 1}
        )
        # Due at the same instant, and run after the sharded one (lower priority).
        await create(api, name="other", handler="plain", priority="low")
        api.clock.advance(60)
        await api.harness.engine.drain()

        _, first, _ = await api.call("GET", f"/v1/jobs/{sharded['id']}/executions", token=READ)
        [failed] = [e for e in first["items"] if e["status"] == "failed"]
        assert (failed["shard"], failed["shards"], failed["dead_letter"]) == (1, 3, "open")
        status, request, _ = await api.call("POST", f"/v1/executions/{failed['id']}/retry")
        assert (status, request["shard"]) == (202, 1), "the failed shard is retried alone"
        await api.harness.engine.drain()

        _, listed, _ = await api.call("GET", "/v1/executions", token=READ)
        rows = [(e["job_name"], e["shard"], e["status"]) for e in listed["items"]]
        assert rows == [
            ("sharded", 0, "success"),
            ("sharded", 1, "failed"),  # the retry, newest first
            ("sharded", 1, "failed"),
            ("sharded", 2, "success"),
            ("other", 0, "success"),
        ]
        assert listed["items"][1]["id"] != failed["id"] == listed["items"][2]["id"]
        assert len({e["occurrence"] for e in listed["items"][:4]}) == 1
        _, of_job, _ = await api.call("GET", f"/v1/jobs/{sharded['id']}/executions", token=READ)
        assert of_job["items"] == listed["items"][:4]
