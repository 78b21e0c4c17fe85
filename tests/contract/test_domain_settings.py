"""The domains' settings in the store, on every backend: a record round-trips exactly, a put
replaces it whole, the list is by name, a delete says whether there was one, a domain without a
record has none (and the defaults), and the jobs each domain holds are counted in one read."""

from __future__ import annotations

from datetime import timedelta

from tests.conftest import T0, make_job
from tests.contract.test_domains import as_before_domains
from tests.fixtures.stores import opened
from tickd.scheduler.domain_settings import DomainSettings, settings_of
from tickd.scheduler.ports.backends import Store

PAYMENTS = DomainSettings(
    name="payments",
    weight=5,
    max_running=20,
    max_jobs=1000,
    lag_objective_seconds=2.5,
    updated_at=T0 + timedelta(microseconds=123_457),
)
SEARCH = DomainSettings(name="search", weight=1000, max_jobs=10_000_000, updated_at=T0)


async def test_a_record_round_trips_exactly(store: Store) -> None:
    assert await store.put_domain(PAYMENTS) == PAYMENTS
    assert await store.get_domain("payments") == PAYMENTS
    bare = DomainSettings(name="eu.billing_2")  # the defaults, no time
    await store.put_domain(bare)
    assert await store.get_domain("eu.billing_2") == bare


async def test_the_list_is_every_record_by_name(store: Store) -> None:
    assert await store.list_domains() == []
    for settings in (SEARCH, PAYMENTS, DomainSettings(name="a-team", updated_at=T0)):
        await store.put_domain(settings)
    assert [domain.name for domain in await store.list_domains()] == [
        "a-team",
        "payments",
        "search",
    ]
    assert (await store.list_domains())[1] == PAYMENTS


async def test_a_put_replaces_the_record_whole(store: Store) -> None:
    await store.put_domain(PAYMENTS)
    later = DomainSettings(name="payments", weight=2, updated_at=T0 + timedelta(hours=1))

    assert await store.put_domain(later) == later
    assert await store.get_domain("payments") == later, "the caps it left out are gone"
    assert await store.list_domains() == [later]


async def test_a_delete_removes_the_record_and_says_whether_there_was_one(store: Store) -> None:
    await store.put_domain(PAYMENTS)
    await store.put_domain(SEARCH)

    assert await store.delete_domain("payments") is True
    assert await store.get_domain("payments") is None
    assert await store.list_domains() == [SEARCH]
    assert await store.delete_domain("payments") is False
    assert await store.delete_domain("nobody") is False
    assert await store.list_domains() == [SEARCH]


async def test_a_domain_without_a_record_has_the_defaults(store: Store) -> None:
    await store.put_domain(SEARCH)

    assert await store.get_domain("payments") is None
    records = {domain.name: domain for domain in await store.list_domains()}
    assert settings_of("payments", records) == DomainSettings(name="payments")
    assert settings_of("search", records) == SEARCH


async def test_the_jobs_of_each_domain_are_counted_in_one_read(store: Store) -> None:
    assert await store.count_jobs_by_domain() == {}
    await store.insert_missing_jobs(
        [
            make_job("a", domain="payments"),
            make_job("b", domain="payments"),
            make_job("c", domain="search", enabled=False),
            make_job("d"),
        ]
    )
    await store.put_domain(DomainSettings(name="empty", max_jobs=3))

    assert await store.count_jobs_by_domain() == {"payments": 2, "search": 1, "default": 1}


async def test_a_database_from_before_domains_gets_their_settings_at_open(
    store_url: str,
) -> None:
    """SQLite creates the table at open, PostgreSQL migrates to it, MongoDB makes the
    collection at the first write; a job written before domains counts in the default one."""
    async with opened(store_url) as store:
        await store.insert_missing_jobs([make_job("older")])
    await as_before_domains(store_url)

    async with opened(store_url) as store:
        assert await store.list_domains() == []
        assert await store.get_domain("payments") is None
        await store.put_domain(PAYMENTS)
        assert await store.list_domains() == [PAYMENTS]
        await store.insert_job(make_job("newer", domain="payments"))
        assert await store.count_jobs_by_domain() == {"default": 1, "payments": 1}
