"""What `tickd run` says and does when it starts: a taken port, what it logs once ready."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from tests.test_daemon import STOP_WITHIN, free_port, refused_start, start_daemon


async def test_a_busy_api_port_stops_startup_in_one_line_before_the_store_is_opened(
    tmp_path: Path,
) -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        code, stderr = await refused_start(tmp_path, TICKD_API_PORT=str(port))

    assert code == 2, stderr[-2000:]
    assert stderr == (
        f"tickd: configuration: api_port: {port} is in use on 127.0.0.1 "
        "(TICKD_API_PORT / api_port)\n"
    )
    assert not (tmp_path / "tickd.db").exists(), "nothing opened, nothing seeded"


async def test_the_startup_log_names_the_dashboards_address(tmp_path: Path) -> None:
    port = free_port()
    process = await start_daemon(tmp_path, port)
    try:
        assert process.stderr is not None
        async with asyncio.timeout(STOP_WITHIN):
            while b"api.listening" not in (line := await process.stderr.readline()):
                assert line, "the daemon ended before it listened"
    finally:
        process.kill()
        await process.wait()

    assert f"dashboard=http://127.0.0.1:{port}/ui" in line.decode()
