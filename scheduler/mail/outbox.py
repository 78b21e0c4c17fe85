"""Mail into a folder of .eml files (`outbox:///path`): the embedded default, easy to inspect."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path


class OutboxMailer:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    async def send(self, message: EmailMessage) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        path = self.folder / f"{stamp}-{uuid.uuid4().hex[:8]}.eml"
        await asyncio.to_thread(self._write, path, message.as_bytes())

    def _write(self, path: Path, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(data)
        partial.rename(path)  # a reader never sees half a message

    async def close(self) -> None:
        return None
