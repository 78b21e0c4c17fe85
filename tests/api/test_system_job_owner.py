"""A system job is tickd's own: no client, `tickd apply` included, makes it theirs."""

from __future__ import annotations

from dataclasses import replace

from tests.api.conftest import Api


async def test_a_system_job_takes_no_owner_even_from_an_admin_token(api: Api) -> None:
    status, made, _ = await api.call(
        "POST",
        "/v1/jobs",
        json={
            "name": "alert-scan",
            "handler": "ping",
            "schedule": {"kind": "interval", "every_seconds": 300},
            "params": {"url": "https://example.com/scan"},
        },
    )
    assert status == 201, made
    stored = await api.store.get_job(made["id"])
    assert stored is not None
    await api.store.delete_job(stored.id)
    await api.store.insert_job(replace(stored, system=True))

    status, body, _ = await api.call(
        "PATCH", f"/v1/jobs/{stored.id}", json={"managed_by": "file:jobs.yaml"}
    )

    assert status == 422, body
    assert body["errors"] == [
        {"field": "managed_by", "reason": "a system job is tickd's own: it takes no owner"}
    ]
    kept = await api.store.get_job(stored.id)
    assert kept is not None and (kept.managed_by, kept.revision) == (None, stored.revision)
