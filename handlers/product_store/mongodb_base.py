"""What the product store's parts on MongoDB share: its collections and indexes, its client
(with a longer socket timeout: the scanner's bulk writes are heavier than the engine's), and
bounded bulk writes and reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, ClassVar

from pymongo import (
    IndexModel,
)

from tickd.handlers.product_store import (
    Doc,
)
from tickd.handlers.product_store.mongodb_queries import (
    ALERT_INDEXES,
    BOUNCE_INDEXES,
    CLAIM_INDEXES,
    FERRETDB_ALERT_WRITES_PER_COMMAND,
    NOTIFICATION_INDEXES,
    PART_INDEXES,
    PRICE_HISTORY_INDEXES,
    QUOTA_SLOT_INDEXES,
    Client,
    Documents,
    product_client_options,
)
from tickd.scheduler.store.kit.mongodb import (
    MongoDatabase,
    chunks,
)


class MongoProductBase(MongoDatabase):
    """The product store's collections; a URL gives it a client of its own, or it shares the job
    store's."""

    INDEXES: ClassVar[Mapping[str, Sequence[IndexModel]]] = {
        "alerts": ALERT_INDEXES,
        "notifications": NOTIFICATION_INDEXES,
        "emailClaims": CLAIM_INDEXES,
        "parts": PART_INDEXES,
        "priceHistory": PRICE_HISTORY_INDEXES,
        "quotaSlots": QUOTA_SLOT_INDEXES,
        "emailBounces": BOUNCE_INDEXES,
    }
    WHAT: ClassVar[str] = "the product store"

    def __init__(self, target: str | Client, *, database: str | None = None) -> None:
        super().__init__(target, database=database)
        # The email claims this store won and has not ended: notification id -> claim id, and
        # the notifications of each claiming token.
        self._claims: dict[str, str] = {}
        self._claims_of_token: dict[str, set[str]] = {}
        # The highest quota slot known taken, by key and day (a lower bound: others take more).
        self._quota_tops: dict[tuple[str, date], int] = {}

    def client_options(self, url: str) -> dict[str, Any]:
        return product_client_options(url)

    # -- collections ----------------------------------------------------------------------------

    @property
    def alerts(self) -> Documents:
        return self.database["alerts"]

    @property
    def part_docs(self) -> Documents:
        return self.database["parts"]

    @property
    def notification_docs(self) -> Documents:
        return self.database["notifications"]

    @property
    def email_claims(self) -> Documents:
        return self.database["emailClaims"]

    @property
    def price_history_docs(self) -> Documents:
        return self.database["priceHistory"]

    @property
    def lease_docs(self) -> Documents:
        return self.database["leases"]

    @property
    def quota_slots(self) -> Documents:
        return self.database["quotaSlots"]

    @property
    def bounce_docs(self) -> Documents:
        return self.database["emailBounces"]

    async def _bulk(
        self, collection: Documents, writes: Sequence[Any], *, heavy: bool = False
    ) -> None:
        """In commands of the size FerretDB can take (one command on MongoDB). FerretDB commits
        each statement on its own; alert writes go FERRETDB_ALERT_WRITES_PER_COMMAND a command,
        well within the socket timeout."""
        size = self._statements_per_update
        if size is not None and heavy:
            size = FERRETDB_ALERT_WRITES_PER_COMMAND
        for batch in chunks(writes, size):
            await collection.bulk_write(batch, ordered=False)

    async def _find(self, collection: Documents, query: Doc, **options: Any) -> list[Doc]:
        return [doc async for doc in collection.find(query, **options)]
