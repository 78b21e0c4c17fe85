"""GET and POST /unsubscribe?token=...: the alert emails' one-click unsubscribe (RFC 8058).

Outside /v1 and without a bearer token: whoever holds the link may use it, and only them, since
the token is signed (handlers/alert_scanner/tokens.py) with `unsubscribe_secret` of
`[handler_settings.alert_scanner]`. These are plain aiohttp routes, not api.routing Routes: the
provider's POST is a form (`List-Unsubscribe=One-Click`), not JSON, and the answer is a page
for a person, not a JSON document.

- GET shows a confirmation page whose button POSTs: a GET never changes anything, because link
  scanners and mail previews fetch every link of an email.
- POST turns the alert's email off (`notifyEmail: false` on its rules and on its notifications
  still waiting), or all of the user's alerts' with an "all" token, in the product store: the
  app shows it, and a user who wants the emails back turns them on there. 200 every time, the
  second as the first (idempotent), also when the alert is gone.
- A token that is not one is a 400, one whose signature does not match (forged, altered, cut
  short, or signed with an earlier secret) a 403; neither changes anything. Without a secret
  configured the path is a 404.
- Every answer is a page for a person, refusals too: it names the part of a single alert's
  link, and a link that does not work says what to do instead.

The API's edge rules for a tokenless API (loopback Host only, same-origin writes) must not
apply to PUBLIC_PATHS: the links are opened from the internet, through the proxy that
`public_base_url` names.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from string import Template

from aiohttp import web

from tickd.api.problems import ApiError
from tickd.api.v1 import STATE
from tickd.handlers.alert_scanner.emails import SUBJECT_PART_CHARS, one_line
from tickd.handlers.alert_scanner.scan import part_name
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.alert_scanner.tokens import ForgedToken, MalformedToken, Unsubscribe, verify
from tickd.handlers.product_store import ProductStore
from tickd.scheduler.store.kit import StoreError

PATH = "/unsubscribe"
PUBLIC_PATHS = frozenset({PATH})
HANDLER = "alert_scanner"
# A page with nothing to run, not to be framed (its button is what a clickjacker would want
# pressed), not kept in caches, and not sending its URL (which holds the token) anywhere.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}

PAGE = Template("""\
<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta name="viewport" content="width=device-width"><title>$title</title></head>
<body style="font-family: sans-serif; max-width: 36em; margin: 3em auto">
<h1 style="font-size: 1.4em">$title</h1>
<p>$text</p>
$form</body>
</html>
""")

FORM = Template("""\
<form method="post" action="?token=$token">
<input type="hidden" name="List-Unsubscribe" value="One-Click">
<button type="submit" style="font-size: 1.1em; padding: 0.4em 1em">$button</button>
</form>
""")


# What a link that does not work says, by the status it is refused with: what to do instead,
# never the token's internals.
BROKEN_LINK = (
    "This unsubscribe link does not work",
    "It may have been cut short or changed on its way: some mail programs break long links. "
    "Open it from the email again, or copy the whole link into your browser's address bar. "
    "You can also turn the emails off in the app.",
)
REFUSALS = {
    400: BROKEN_LINK,
    403: BROKEN_LINK,
    404: ("Unsubscribe links are not set up here", "You can turn the emails off in the app."),
    503: (
        "The emails cannot be turned off right now",
        "Try the link again in a minute, or turn the emails off in the app.",
    ),
}
Route = Callable[[web.Request], Awaitable[web.Response]]


def add_unsubscribe_routes(app: web.Application) -> None:
    app.router.add_get(PATH, confirm)
    app.router.add_post(PATH, unsubscribe)


def refused_as_pages(route: Route) -> Route:
    """A refusal is a page, with its status: the link was opened by a person, not a program."""

    @functools.wraps(route)
    async def answer(request: web.Request) -> web.Response:
        try:
            return await route(request)
        except ApiError as exc:
            title, text = REFUSALS.get(exc.status, (exc.title, exc.detail or exc.title))
            return _page(title, text, "", status=exc.status, headers=exc.headers)

    return answer


@dataclass(frozen=True)
class Scope:
    """What a link turns off, in words: as asked ("Stop ...?") and as done ("no more ...")."""

    asked: str
    done: str


@refused_as_pages
async def confirm(request: web.Request) -> web.Response:
    """A person's click: say what the button will do; change nothing."""
    wanted, token = _unsubscribe_request(request)
    scope = await _scope(request.app[STATE].products, wanted)
    form = FORM.substitute(token=html.escape(token), button=html.escape(f"Stop {scope.asked}"))
    return _page(f"Stop {scope.asked}?", "You can turn them on again in the app at any time.", form)


@refused_as_pages
async def unsubscribe(request: web.Request) -> web.Response:
    """The provider's one-click POST, or the confirmation page's button."""
    wanted, _ = _unsubscribe_request(request)
    products = request.app[STATE].products
    if products is None:
        raise ApiError(503, "Service Unavailable", "the product store is not open here")
    try:
        await products.turn_off_email(wanted.user_id, wanted.alert_id)
    except StoreError as exc:
        raise ApiError(503, "Service Unavailable", "the product store is unavailable") from exc
    scope = await _scope(products, wanted)
    text = "Done. You can turn them on again in the app at any time."
    return _page(f"You will get no more {scope.done}.", text, "")


def _unsubscribe_request(request: web.Request) -> tuple[Unsubscribe, str]:
    """The signed request, and its token; 404, 400 or 403 otherwise."""
    secret = _settings(request).unsubscribe_secret
    if secret is None:
        raise ApiError(404, "Not Found", "unsubscribe links are not configured on this server")
    given = request.query.getall("token", [])
    if len(given) != 1 or set(request.query) != {"token"}:
        raise _token_error(400, "exactly one token, and nothing else")
    try:
        return verify(secret, given[0]), given[0]
    except MalformedToken:
        raise _token_error(400, "not an unsubscribe token (was the link cut off?)") from None
    except ForgedToken:
        raise _token_error(403, "the signature does not match") from None


def _token_error(status: int, reason: str) -> ApiError:
    title = "Forbidden" if status == 403 else "Invalid request"
    return ApiError(status, title, f"query.token: {reason}", [("query.token", reason)])


def _settings(request: web.Request) -> EmailSettings:
    config = request.app[STATE].settings.handler_settings.get(HANDLER, {})
    try:
        return EmailSettings.parse(config)
    except ValueError as exc:
        # Misconfigured: the same message the scanner fails with (never the secret's value).
        raise ApiError(503, "Service Unavailable", str(exc)) from None


async def _scope(products: ProductStore | None, wanted: Unsubscribe) -> Scope:
    if wanted.alert_id is None:
        return Scope("all your part alert emails", "part alert emails")
    part = await _part_watched(products, wanted.user_id, wanted.alert_id)
    if part is None:
        return Scope("the emails of this alert", "emails of this alert")
    return Scope(f"the emails of your alert on {part}", f"emails of your alert on {part}")


async def _part_watched(products: ProductStore | None, user_id: str, alert_id: str) -> str | None:
    """The name of the part the user's alert watches, as its emails name it; None when the
    alert is gone, not the user's, or the store cannot say (the page is shown regardless)."""
    if products is None:
        return None
    try:
        alert = await products.get_alert(alert_id)
        if alert is None or str(alert.doc.get("userId")) != user_id:
            return None
        part_id = str(alert.doc.get("partId"))
        part = (await products.parts([part_id])).get(part_id, {})
    except StoreError:
        return None
    return one_line(part_name(part, part_id), SUBJECT_PART_CHARS)


def _page(
    title: str,
    text: str,
    form: str,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = PAGE.substitute(title=html.escape(title), text=html.escape(text), form=form)
    return web.Response(
        text=body,
        status=status,
        content_type="text/html",
        headers={**(headers or {}), **PAGE_HEADERS},
    )
