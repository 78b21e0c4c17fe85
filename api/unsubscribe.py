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
- A token that is not one is a 400, one whose signature does not match (forged, altered, or
  signed with an earlier secret) a 403; neither changes anything. Without a secret configured
  the path is a 404.

The API's edge rules for a tokenless API (loopback Host only, same-origin writes) must not
apply to PUBLIC_PATHS: the links are opened from the internet, through the proxy that
`public_base_url` names.
"""

from __future__ import annotations

import html
from string import Template

from aiohttp import web

from tickd.api.problems import ApiError
from tickd.api.v1 import STATE
from tickd.handlers.alert_scanner.settings import EmailSettings
from tickd.handlers.alert_scanner.tokens import ForgedToken, MalformedToken, Unsubscribe, verify
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


def add_unsubscribe_routes(app: web.Application) -> None:
    app.router.add_get(PATH, confirm)
    app.router.add_post(PATH, unsubscribe)


async def confirm(request: web.Request) -> web.Response:
    """A person's click: say what the button will do; change nothing."""
    wanted, token = _unsubscribe_request(request)
    what = _what(wanted)
    form = FORM.substitute(token=html.escape(token), button=html.escape(f"Stop {what}"))
    return _page(f"Stop {what}?", "You can turn them on again in the app at any time.", form)


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
    text = "Done. You can turn them on again in the app at any time."
    return _page(f"You will get no more {_what(wanted).removeprefix('the ')}", text, "")


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


def _what(wanted: Unsubscribe) -> str:
    return "all your part alert emails" if wanted.alert_id is None else "the emails of this alert"


def _page(title: str, text: str, form: str) -> web.Response:
    body = PAGE.substitute(title=html.escape(title), text=html.escape(text), form=form)
    return web.Response(text=body, content_type="text/html", headers=PAGE_HEADERS)
