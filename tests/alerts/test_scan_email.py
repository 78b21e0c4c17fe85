"""The scan's emails received by a real SMTP server (aiosmtpd), against every product store: what
arrives, and what is recorded when the server refuses, answers 4xx or drops the connection."""

from __future__ import annotations

from typing import Any

from tests.alerts.builders import alert, part, price_rule, rule
from tests.alerts.conftest import SmtpServer, StartSmtp
from tests.fixtures.times import T0
from tickd.handlers.alert_scanner.delivery import EmailPolicy
from tickd.handlers.alert_scanner.scan import ScanLimits, ScanResult, scan
from tickd.handlers.product_store import Notification, ProductStore
from tickd.scheduler.mail.smtp import SmtpMailer
from tickd.scheduler.ports.clock import FakeClock

FROM = "alerts@tickd.example"


async def seeded(products: ProductStore, part_name: str = "LM317T") -> None:
    await products.upsert_parts([part("p1", name=part_name, price=12, lifecycle="EOL")])
    await products.upsert_alerts(
        [
            alert(
                "a1",
                price_rule("r1"),
                rule("r2", "lifecycle", "changed", None, cursor="Active"),
                part_id="p1",
                user="ada",
            ),
            alert("a2", price_rule("r1"), part_id="p1", user="grace"),
        ]
    )


async def run(products: ProductStore, url: str, clock: FakeClock, **email: Any) -> ScanResult:
    policy = EmailPolicy(from_address=FROM, **email)
    return await scan(products, SmtpMailer(url), clock, ScanLimits(email=policy))


async def notifications_of(products: ProductStore, user: str) -> list[Notification]:
    return await products.notifications(user_id=user)


async def test_each_user_receives_one_email_with_both_parts(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    await seeded(products)
    result = await run(products, server.url(), clock)
    assert (result.triggered, result.emails_sent, result.emails_failed) == (3, 2, 0)
    by_recipient = {tuple(r.rcpt_tos): r for r in server.received}
    assert set(by_recipient) == {("ada@example.com",), ("grace@example.com",)}
    ada = by_recipient[("ada@example.com",)]
    assert ada.mail_from == FROM
    assert ada.message["Subject"] == "LM317T is now EOL, and 1 more"
    assert ada.message.get_content_type() == "multipart/alternative"
    text, html = ada.message.get_body(("plain",)), ada.message.get_body(("html",))
    assert text is not None and html is not None
    assert "+20% against the baseline 10" in text.get_content()
    assert "the lifecycle stage changed" in html.get_content()
    assert all(n.emailed_at == T0 for n in await products.notifications())


async def test_part_names_are_escaped_and_cannot_inject_headers(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    await seeded(products, part_name="<script>x()</script>\r\nBcc: eve@example.com")
    await run(products, server.url(), clock)
    assert sorted(tuple(r.rcpt_tos) for r in server.received) == [
        ("ada@example.com",),
        ("grace@example.com",),
    ]
    for received in server.received:
        assert received.message["Bcc"] is None
        assert "\n" not in str(received.message["Subject"])
        html = received.message.get_body(("html",))
        assert html is not None
        assert "<script>" not in html.get_content()
        assert "&lt;script&gt;x()&lt;/script&gt; Bcc: eve@example.com" in html.get_content()


async def test_a_refusal_is_recorded_and_not_retried(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    server.rcpt_reply = "550 5.1.1 no such user"
    await seeded(products)
    result = await run(products, server.url(), clock)
    assert (result.emails_sent, result.emails_failed) == (0, 2)
    assert clock.now() == T0  # no backoff: a 5xx is not retried
    for n in await products.notifications():
        assert n.emailed_at is None and n.email_failed_at == T0 and n.email_attempts == 1
        assert n.email_error is not None and "550 5.1.1 no such user" in n.email_error
    server.rcpt_reply = None
    clock.advance(3600)
    assert (await run(products, server.url(), clock)).emails_sent == 0
    assert server.received == []


async def test_a_transient_failure_is_retried_with_backoff_within_the_scan(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    server.data_replies = ["451 4.3.0 try again later", "250 OK"]
    await seeded(products)
    result = await run(products, server.url(), clock, concurrency=1)
    assert (result.emails_sent, result.emails_failed) == (2, 0)
    assert server.data_commands == 3  # the first email twice, the second once
    assert clock.now() == T0.replace(second=1)  # waited 1 s before the retry
    assert len(server.received) == 2
    assert all(n.emailed_at is not None for n in await products.notifications())


async def test_a_server_that_keeps_failing_is_given_up_after_a_few_scans(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    server.data_replies = ["451 4.3.0 try again later"]
    await seeded(products)
    first = await run(products, server.url(), clock, concurrency=1, scans_before_giving_up=2)
    assert (first.emails_sent, first.emails_failed) == (0, 2)
    assert server.data_commands == 2 * 3  # three attempts per email
    assert clock.now() == T0.replace(second=2 * (1 + 2))  # 1 s then 2 s, per email
    (ada_price, _) = await notifications_of(products, "ada")
    assert (ada_price.email_attempts, ada_price.email_failed_at) == (1, None)
    assert ada_price.email_error is not None and "451" in ada_price.email_error

    second = await run(products, server.url(), clock, concurrency=1, scans_before_giving_up=2)
    assert second.emails_failed == 2 and server.data_commands == 12
    given_up = await products.notifications()
    assert all(n.email_attempts == 2 and n.email_failed_at is not None for n in given_up)

    third = await run(products, server.url(), clock, scans_before_giving_up=2)
    assert (third.emails_sent, third.emails_failed, server.data_commands) == (0, 0, 12)


async def test_dropped_connections_are_retried_then_recorded_and_sent_later(
    products: ProductStore,
    start_smtp: StartSmtp,
    dropping_server: int,
    clock: FakeClock,
) -> None:
    await seeded(products)
    dropping = f"smtp://127.0.0.1:{dropping_server}?starttls=false&timeout=5"
    failed = await run(products, dropping, clock)
    assert (failed.emails_sent, failed.emails_failed) == (0, 2)
    for n in await products.notifications():
        assert n.emailed_at is None and n.email_failed_at is None and n.email_attempts == 1
        assert n.email_error is not None and "Unexpected EOF" in n.email_error
    server: SmtpServer = await start_smtp()
    recovered = await run(products, server.url(), clock)
    assert recovered.emails_sent == 2 and len(server.received) == 2


# -- hard bounces -------------------------------------------------------------------------------


def waiting(notification_id: str, user: str = "ada") -> Notification:
    """A notification waiting for its email, as a scan leaves it."""
    return Notification(
        id=notification_id,
        user_id=user,
        email=f"{user}@example.com",
        alert_id="a1",
        rule_id="r1",
        part_id="p1",
        part_name="LM317T",
        type="lifecycle",
        operator="changed",
        threshold=None,
        previous_value="Active",
        current_value="EOL",
        message="LM317T: lifecycle stage Active -> EOL",
        reason="the lifecycle stage changed",
        created_at=T0,
        notify_email=True,
    )


async def test_after_three_hard_bounces_an_address_gets_no_more_mail_until_cleared(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    server.rcpt_reply = "550 5.1.1 <ada@example.com>: no such user"
    for n in range(1, 4):
        await products.insert_notifications([waiting(f"n{n}")])
        assert (await run(products, server.url(), clock)).emails_failed == 1
        (bounce,) = await products.bounces()
        assert (bounce.address, bounce.count) == ("ada@example.com", n)
        assert "550 5.1.1" in bounce.last_error
    server.rcpt_reply = None  # the server would take it now, but the address is blocked
    await products.insert_notifications([waiting("n4"), waiting("g1", user="grace")])
    result = await run(products, server.url(), clock)
    assert (result.emails_sent, result.emails_failed) == (1, 1)
    assert [r.rcpt_tos for r in server.received] == [["grace@example.com"]]
    blocked = {n.id: n for n in await products.notifications()}["n4"]
    assert blocked.email_failed_at == T0 and blocked.email_error is not None
    assert "refused permanently 3 times" in blocked.email_error

    assert await products.clear_bounce("ada@example.com")
    await products.insert_notifications([waiting("n5")])
    assert (await run(products, server.url(), clock)).emails_sent == 1
    assert [r.rcpt_tos for r in server.received][-1] == ["ada@example.com"]


async def test_a_delivery_that_works_again_forgets_the_bounces(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    server = await start_smtp()
    server.rcpt_reply = "550 5.2.1 mailbox disabled"
    await products.insert_notifications([waiting("n1")])
    await run(products, server.url(), clock)
    assert [b.count for b in await products.bounces()] == [1]
    server.rcpt_reply = None
    await products.insert_notifications([waiting("n2")])
    assert (await run(products, server.url(), clock)).emails_sent == 1
    assert await products.bounces() == []


async def test_a_refused_message_is_not_a_bounce_of_the_address(
    products: ProductStore, start_smtp: StartSmtp, clock: FakeClock
) -> None:
    """554 5.7.1 (policy: spam) refuses the message, not the mailbox: the address stays."""
    server = await start_smtp()
    server.data_replies = ["554 5.7.1 rejected as spam"]
    await products.insert_notifications([waiting("n1")])
    assert (await run(products, server.url(), clock)).emails_failed == 1
    assert await products.bounces() == []
