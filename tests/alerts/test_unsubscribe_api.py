"""The API side of the alert emails: /unsubscribe (no login, a signed token) and /v1/bounces
(ops), over the product store on every backend."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.alerts.builders import alert, price_rule, rule
from tests.api.conftest import ADMIN, READ, TOKENS
from tests.conftest import EngineFactory
from tests.fixtures.times import T0
from tickd.app import build_api
from tickd.handlers.alert_scanner import tokens
from tickd.handlers.product_store import ProductStore

SECRET = "u" * 40
SETTINGS = {"alert_scanner": {"unsubscribe_secret": SECRET, "public_base_url": "https://t.example"}}
Client = TestClient[Any, Any]


@pytest.fixture
async def client_for(
    make_engine: EngineFactory, products: ProductStore
) -> AsyncIterator[Callable[..., Any]]:
    clients: list[Client] = []

    async def start(
        handler_settings: dict[str, Any] = SETTINGS, api_tokens: tuple[Any, ...] = TOKENS
    ) -> Client:
        harness = make_engine({}, api_tokens=api_tokens, handler_settings=handler_settings)
        engine = harness.engine
        app = build_api(
            harness.settings,
            harness.registry,
            engine.ports,
            engine.metrics,
            engine,
            dispatch=False,
            resources={"products": products},
        )
        client: Client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
async def client(client_for: Callable[..., Any]) -> Client:
    started: Client = await client_for()
    return started


async def seeded(products: ProductStore) -> None:
    await products.upsert_alerts(
        [
            alert("a1", price_rule("r1"), rule("r2", "lifecycle", "changed", None), user="ada"),
            alert("a2", price_rule("r1"), user="ada"),
            alert("g1", price_rule("r1"), user="grace"),
        ]
    )


async def email_flags(products: ProductStore) -> dict[str, list[Any]]:
    flags = {}
    for alert_id in ("a1", "a2", "g1"):
        stored = await products.get_alert(alert_id)
        assert stored is not None
        flags[alert_id] = [r.get("notifyEmail") for r in stored.doc["rules"]]
    return flags


ALL_ON = {"a1": [True, True], "a2": [True], "g1": [True]}
ONE_CLICK = {"List-Unsubscribe": "One-Click"}


async def test_the_providers_one_click_post_turns_the_alerts_email_off_idempotently(
    client: Client, products: ProductStore
) -> None:
    await seeded(products)
    token = tokens.sign(SECRET, "ada", "a1")
    for _ in range(2):  # a second POST (a retrying provider, a second click) is the same 200
        response = await client.post(f"/unsubscribe?token={token}", data=ONE_CLICK)
        assert response.status == 200
        assert "You will get no more emails of your alert on part-1" in await response.text()
    assert await email_flags(products) == {**ALL_ON, "a1": [False, False]}


async def test_a_tokenless_api_behind_a_proxy_still_takes_the_providers_post(
    client_for: Callable[..., Any], products: ProductStore
) -> None:
    """Without API tokens only loopback names are served, but the links of an email are opened
    from the internet through a proxy: /unsubscribe, guarded by its own token, is exempt."""
    open_api: Client = await client_for(api_tokens=())
    await seeded(products)
    token = tokens.sign(SECRET, "ada", "a1")
    public = {"Host": "t.example", "Origin": "https://mail.example"}
    response = await open_api.post(f"/unsubscribe?token={token}", data=ONE_CLICK, headers=public)
    assert response.status == 200
    assert (await open_api.get("/v1/jobs", headers=public)).status == 421, "the rest is not"


async def test_the_all_token_turns_off_every_alert_of_the_user_and_no_one_elses(
    client: Client, products: ProductStore
) -> None:
    await seeded(products)
    token = tokens.sign(SECRET, "ada", None)
    response = await client.post("/unsubscribe", params={"token": token}, data=ONE_CLICK)
    assert response.status == 200
    assert await email_flags(products) == {"a1": [False, False], "a2": [False], "g1": [True]}


async def test_a_get_shows_a_page_whose_button_posts_and_changes_nothing(
    client: Client, products: ProductStore
) -> None:
    await seeded(products)
    token = tokens.sign(SECRET, "ada", "a1")
    response = await client.get("/unsubscribe", params={"token": token})
    assert response.status == 200 and response.content_type == "text/html"
    page = await response.text()
    assert '<form method="post" action="?token=' + token + '">' in page
    assert 'name="List-Unsubscribe" value="One-Click"' in page
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert await email_flags(products) == ALL_ON  # link scanners GET every link


def altered(token: str) -> str:
    payload, mac = token.split(".")
    flipped = "A" if payload[5] != "A" else "B"
    return f"{payload[:5]}{flipped}{payload[6:]}.{mac}"


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(
    ("token", "status"),
    [
        (tokens.sign("x" * 40, "ada", "a1"), 403),  # another secret: forged
        (
            tokens.sign(SECRET, "grace", "g1").split(".")[0]
            + "."
            + tokens.sign(SECRET, "ada", "a1").split(".")[1],
            403,
        ),
        (altered(tokens.sign(SECRET, "ada", "a1")), 403),
        (tokens.sign(SECRET, "ada", "a1")[:-3], 403),  # cut off
        ("not-a-token", 400),
        ("", 400),
    ],
)
async def test_a_forged_or_altered_token_is_refused_and_changes_nothing(
    client: Client, products: ProductStore, method: str, token: str, status: int
) -> None:
    await seeded(products)
    response = await client.request(method, "/unsubscribe", params={"token": token})
    assert response.status == status
    assert response.content_type == "text/html", "a person opened the link: a page, not JSON"
    assert "This unsubscribe link does not work" in await response.text()
    assert await email_flags(products) == ALL_ON


async def test_the_token_is_required_once_and_alone(client: Client, products: ProductStore) -> None:
    token = tokens.sign(SECRET, "ada", "a1")
    for query in ("", f"?token={token}&token={token}", f"?token={token}&then=more"):
        assert (await client.post(f"/unsubscribe{query}")).status == 400


async def test_no_bearer_token_is_needed_but_without_a_secret_there_is_no_unsubscribe(
    client_for: Callable[..., Any], products: ProductStore
) -> None:
    await seeded(products)
    unconfigured: Client = await client_for({})
    token = tokens.sign(SECRET, "ada", "a1")
    assert (await unconfigured.post(f"/unsubscribe?token={token}")).status == 404
    assert await email_flags(products) == ALL_ON


# -- /v1/bounces --------------------------------------------------------------------------------


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_ops_list_bounced_addresses_and_clear_one(
    client: Client, products: ProductStore
) -> None:
    for _ in range(3):
        await products.record_bounce("ada@example.com", error="550 5.1.1 no such user", at=T0)
    await products.record_bounce("bob@example.com", error="550 5.1.1 gone", at=T0)
    assert (await client.get("/v1/bounces")).status == 401
    listed = await client.get("/v1/bounces", headers=bearer(READ))
    assert listed.status == 200
    body = await listed.json()
    assert body["blocked_after"] == 3
    by_address = {item["address"]: item for item in body["items"]}
    assert by_address["ada@example.com"]["blocked"] is True
    assert by_address["ada@example.com"]["count"] == 3
    assert by_address["bob@example.com"]["blocked"] is False
    assert by_address["bob@example.com"]["last_error"] == "550 5.1.1 gone"

    path = "/v1/bounces/ada@example.com"
    assert (await client.delete(path, headers=bearer(READ))).status == 403
    assert (await client.delete(path, headers=bearer(ADMIN))).status == 204
    assert (await client.delete(path, headers=bearer(ADMIN))).status == 404
    assert [b.address for b in await products.bounces()] == ["bob@example.com"]


def test_tickd_api_opens_the_product_store_when_the_alert_scanner_is_installed() -> None:
    """`tickd api` runs no handler, but answers the emails' links from the product store."""
    from tickd.app import api_resources, load_registry

    assert [r.name for r in api_resources(load_registry())] == ["products"]


async def page_text(response: Any) -> str:
    """The page's words, without its markup."""
    assert response.content_type == "text/html"
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(await response.text())).split())


@pytest.mark.parametrize(
    ("alert_id", "asked", "done"),
    [
        (
            "a1",
            "Stop the emails of your alert on LM317T?",
            "You will get no more emails of your alert on LM317T.",
        ),
        (None, "Stop all your part alert emails?", "You will get no more part alert emails."),
    ],
)
async def test_the_unsubscribe_pages_say_in_plain_words_what_stops(
    client: Client, products: ProductStore, alert_id: str | None, asked: str, done: str
) -> None:
    await seeded(products)
    await products.upsert_parts([{"_id": "part-1", "name": "LM317T"}])
    token = tokens.sign(SECRET, "ada", alert_id)

    confirmation = await page_text(await client.get("/unsubscribe", params={"token": token}))
    finished = await page_text(
        await client.post("/unsubscribe", params={"token": token}, data=ONE_CLICK)
    )

    assert confirmation.startswith(asked)
    assert finished.startswith(done)
    assert "no more all your" not in finished


async def test_an_alert_that_is_gone_is_this_alert(client: Client, products: ProductStore) -> None:
    token = tokens.sign(SECRET, "ada", "deleted-alert")

    finished = await page_text(
        await client.post("/unsubscribe", params={"token": token}, data=ONE_CLICK)
    )

    assert finished.startswith("You will get no more emails of this alert.")


@pytest.mark.parametrize("kept", [0.4, 0.7])
async def test_a_cut_link_shows_a_page_saying_what_to_do(
    client: Client, products: ProductStore, kept: float
) -> None:
    await seeded(products)
    token = tokens.sign(SECRET, "ada", "a1")
    cut = token[: int(len(token) * kept)]  # a mail program wrapped the long line

    response = await client.get("/unsubscribe", params={"token": cut})

    assert response.status in (400, 403)
    assert response.headers["Content-Type"].startswith("text/html")
    text = await page_text(response)
    assert text.startswith("This unsubscribe link does not work")
    assert "copy the whole link" in text and "turn the emails off in the app" in text
    assert "{" not in text and "query.token" not in text
    assert await email_flags(products) == ALL_ON
