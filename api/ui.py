"""The ops dashboard at /ui: static files shipped in the package, no build step, nothing fetched
from elsewhere at run time.

The shell loads without a token (it holds no data); every figure it shows comes from /v1 with the
bearer token the user typed, kept in the browser's sessionStorage. The files are read once, at
startup, from a fixed list: a request names a file of that list or gets a 404, so no path a
client sends ever reaches the file system.
"""

from __future__ import annotations

from importlib.resources import files

from aiohttp import web

UI_PACKAGE_DIR = "ui"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Only this origin's scripts, styles and API; no inline script, no framing, no plug-ins.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # Small files; a new release must show at once, not after a cache expires.
    "Cache-Control": "no-cache",
}
UI_FILES = web.AppKey("ui_files", dict)


def ui_files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, content type), for every file of api/ui with a known type."""
    folder = files("tickd.api").joinpath(UI_PACKAGE_DIR)
    found: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            found[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return found


def static_response(request: web.Request, name: str) -> web.Response:
    known: dict[str, tuple[bytes, str]] = request.app[UI_FILES]
    if name not in known:
        raise web.HTTPNotFound()
    body, content_type = known[name]
    return web.Response(body=body, headers={"Content-Type": content_type, **SECURITY_HEADERS})


async def shell(request: web.Request) -> web.Response:
    return static_response(request, "index.html")


async def asset(request: web.Request) -> web.Response:
    return static_response(request, request.match_info["name"])


def add_ui_routes(app: web.Application) -> None:
    app[UI_FILES] = ui_files()
    app.router.add_get("/ui", shell)
    app.router.add_get("/ui/", shell)
    app.router.add_get("/ui/{name}", asset)
