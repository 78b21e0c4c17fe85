"""What a first visit finds: the address alone leads to the dashboard, /docs shows the shapes
of the bodies each operation takes and gives."""

from __future__ import annotations

import re

from tests.api.conftest import Api


async def test_the_bare_address_leads_to_the_dashboard(open_api: Api) -> None:
    async with open_api.client.get("/", allow_redirects=False) as response:
        assert response.status in (301, 302, 307, 308)
        assert response.headers["Location"] == "/ui"


async def test_the_docs_page_shows_each_operations_schemas(api: Api) -> None:
    async with api.client.get("/docs") as response:
        assert response.status == 200
        page = await response.text()

    # Creating a job: its body's schema linked from the operation, and shown with its fields.
    create = re.search(r"<tr><td><code>POST</code></td><td><code>/v1/jobs</code>.*?</tr>", page)
    assert create is not None and "href='#JobCreate'" in create.group(0)
    schema = re.search(r"<section id='JobCreate'>.*?</section>", page, re.S)
    assert schema is not None, "the JobCreate schema has its own section"
    for field in ("name", "handler", "schedule", "params", "timeout_seconds"):
        assert f"<code>{field}</code>" in schema.group(0)
    assert "required" in schema.group(0)
