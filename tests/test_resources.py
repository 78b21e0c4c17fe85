"""Resources: what handlers declare, the daemon opens once, hands to their runs, and closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.conftest import EngineFactory, make_job
from tickd.app import declared_resources, opened_resources
from tickd.handlers.product_store import PRODUCTS
from tickd.scheduler.config.settings import ConfigError, Settings, load_settings
from tickd.scheduler.model import Status
from tickd.scheduler.plugin.api import HandlerContext, Resource, ResourceEnv, Result, handler
from tickd.scheduler.plugin.registry import HandlerRegistry
from tickd.scheduler.ports.backends import ExecutionQuery


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.closed = False


opened: list[Client] = []


@asynccontextmanager
async def open_client(env: ResourceEnv) -> AsyncIterator[Client]:
    client = Client(env.url("vendor"))
    opened.append(client)
    try:
        yield client
    finally:
        client.closed = True


VENDOR = Resource("vendor", open=open_client)


@handler(resources=(VENDOR,))
async def uses_vendor(ctx: HandlerContext) -> Result:
    return {"url": ctx.resource(VENDOR).url}


@handler(resources=(VENDOR,))
async def also_uses_vendor(ctx: HandlerContext) -> Result:
    return None


async def forgot_to_declare(ctx: HandlerContext) -> Result:
    ctx.resource(VENDOR)
    return None


@pytest.fixture(autouse=True)
def fresh() -> None:
    opened.clear()


def registry() -> HandlerRegistry:
    handlers = HandlerRegistry()
    handlers.register("uses_vendor", uses_vendor)
    handlers.register("also_uses_vendor", also_uses_vendor)
    handlers.register("forgot_to_declare", forgot_to_declare)
    return handlers


async def test_a_resource_two_handlers_declare_is_opened_once_and_closed_on_the_way_out() -> None:
    settings = Settings(store_url="sqlite:///var/jobs.db", api_port=0)
    async with opened_resources(declared_resources(registry()), settings) as resources:
        assert list(resources) == ["vendor"]
        assert len(opened) == 1 and not opened[0].closed
    assert opened[0].closed


async def test_a_resource_keeps_its_data_where_resource_urls_say_else_beside_the_jobs() -> None:
    beside = Settings(store_url="sqlite:///var/jobs.db", api_port=0)
    apart = Settings(
        store_url="sqlite:///var/jobs.db",
        api_port=0,
        resource_urls={"vendor": "mongodb://vendor-db/app"},
    )
    for settings, url in ((beside, "sqlite:///var/jobs.db"), (apart, "mongodb://vendor-db/app")):
        async with opened_resources(declared_resources(registry()), settings) as resources:
            client = resources["vendor"]
            assert isinstance(client, Client) and client.url == url


async def test_a_run_sees_the_resources_its_handler_declared_and_only_those(
    make_engine: EngineFactory,
) -> None:
    settings = Settings(store_url="sqlite:///var/jobs.db", api_port=0)
    async with opened_resources([VENDOR], settings) as resources:
        h = make_engine(
            {"uses_vendor": uses_vendor, "forgot_to_declare": forgot_to_declare},
            resources=resources,
        )
        await h.add(make_job("declared", "uses_vendor"))
        await h.add(make_job("undeclared", "forgot_to_declare"))
        await h.engine.drain()
    runs = {e.job_name: e for e in await h.store.list_executions(ExecutionQuery())}
    assert runs["declared"].status is Status.SUCCESS
    assert runs["declared"].result == {"url": "sqlite:///var/jobs.db"}
    undeclared = runs["undeclared"]
    assert undeclared.status is Status.FAILED and undeclared.error is not None
    assert "'vendor' was not declared" in undeclared.error.message


def test_resource_urls_come_from_the_file_and_from_one_variable_each(tmp_path: Path) -> None:
    config = tmp_path / "tickd.toml"
    config.write_text('[resource_urls]\nproducts = "sqlite:///var/products.db"\n')
    from_file = load_settings(config, environ={})
    assert from_file.resource_urls == {"products": "sqlite:///var/products.db"}
    environ = {"TICKD_RESOURCE_URLS__PRODUCTS": "mongodb://product-db/app"}
    assert load_settings(config, environ=environ).resource_urls == {
        "products": "mongodb://product-db/app"
    }


def test_a_resource_url_without_a_scheme_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"resource_urls\.products"):
        Settings(resource_urls={"products": "product-db/app"})


def test_resource_urls_are_never_shown() -> None:
    settings = Settings(resource_urls={"products": "mongodb://app:hunter2@db/app"})
    assert "hunter2" not in repr(settings)


async def test_the_products_beside_a_postgresql_store_are_refused_saying_where_to_put_them(
    tmp_path: Path,
) -> None:
    """The product store runs on SQLite and MongoDB; beside jobs in PostgreSQL it cannot open,
    and startup says which setting to give, before anything connects."""
    settings = Settings(store_url="postgresql://tickd@pg.invalid:5432/tickd", api_port=0)
    with pytest.raises(ConfigError) as refused:
        async with opened_resources([PRODUCTS], settings):
            pass
    assert refused.value.setting == "store_url"
    assert "set [resource_urls] products" in str(refused.value)

    apart = Settings(
        store_url=settings.store_url,
        api_port=0,
        resource_urls={"products": f"sqlite:///{tmp_path}/products.db"},
    )
    async with opened_resources([PRODUCTS], apart) as resources:
        assert resources["products"] is not None
