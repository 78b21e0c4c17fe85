"""The domains' settings on PostgreSQL, a row each in `domains` (migration 4), and the jobs each
domain holds (the store's DomainStore role). Rows as SQLite's, read by the same conversions."""

from __future__ import annotations

from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.store.postgresql.base import PostgresTables
from tickd.scheduler.store.sqlite.rows import domain_from_row, domain_row
from tickd.scheduler.store.sqlite.schema import DOMAIN_COLUMNS

COLUMNS = ", ".join(DOMAIN_COLUMNS)
PUT = (
    f"INSERT INTO domains ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in DOMAIN_COLUMNS[1:])
)
# Read through jobs_by_domain (migration 3), which holds every job's domain.
JOBS_BY_DOMAIN = "SELECT domain, count(*) FROM jobs GROUP BY domain"


class PostgresDomains(PostgresTables):
    """The domains of PostgresStore."""

    async def list_domains(self) -> list[DomainSettings]:
        rows = await self._fetch(f"SELECT {COLUMNS} FROM domains ORDER BY name")
        return [domain_from_row(row) for row in rows]

    async def get_domain(self, name: str) -> DomainSettings | None:
        row = await self._fetchrow(f"SELECT {COLUMNS} FROM domains WHERE name = $1", name)
        return None if row is None else domain_from_row(row)

    async def put_domain(self, settings: DomainSettings) -> DomainSettings:
        await self._execute(PUT, *domain_row(settings))
        return settings

    async def delete_domain(self, name: str) -> bool:
        return await self._execute("DELETE FROM domains WHERE name = $1", name) > 0

    async def count_jobs_by_domain(self) -> dict[str, int]:
        rows = await self._fetch(JOBS_BY_DOMAIN)
        return {str(row[0]): int(row[1]) for row in rows}
