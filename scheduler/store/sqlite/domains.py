"""The domains' settings on SQLite, a row each in `domains`, and the jobs each domain holds (the
store's DomainStore role). The reads run on the readers, as the API's other reads do."""

from __future__ import annotations

from tickd.scheduler.domain_settings import DomainSettings
from tickd.scheduler.store.sqlite.base import SQLiteTables
from tickd.scheduler.store.sqlite.rows import domain_from_row, domain_row
from tickd.scheduler.store.sqlite.schema import DOMAIN_COLUMNS

COLUMNS = ", ".join(DOMAIN_COLUMNS)
PUT = (
    f"INSERT INTO domains ({COLUMNS}) VALUES ({', '.join('?' * len(DOMAIN_COLUMNS))}) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in DOMAIN_COLUMNS[1:])
)
# Read through jobs_by_domain (views.py), which holds every job's domain: the table is not read.
JOBS_BY_DOMAIN = "SELECT domain, count(*) FROM jobs GROUP BY domain"


class SQLiteDomains(SQLiteTables):
    """The domains of SQLiteStore."""

    async def list_domains(self) -> list[DomainSettings]:
        sql = f"SELECT {COLUMNS} FROM domains ORDER BY name"
        rows = await self._read(lambda db: db.execute(sql).fetchall())
        return [domain_from_row(row) for row in rows]

    async def get_domain(self, name: str) -> DomainSettings | None:
        sql = f"SELECT {COLUMNS} FROM domains WHERE name = ?"
        row = await self._read(lambda db: db.execute(sql, (name,)).fetchone())
        return None if row is None else domain_from_row(row)

    async def put_domain(self, settings: DomainSettings) -> DomainSettings:
        await self._run(lambda db: db.execute(PUT, domain_row(settings)))
        return settings

    async def delete_domain(self, name: str) -> bool:
        sql = "DELETE FROM domains WHERE name = ?"
        deleted = await self._run(lambda db: db.execute(sql, (name,)).rowcount)
        return bool(deleted)

    async def count_jobs_by_domain(self) -> dict[str, int]:
        rows = await self._read(lambda db: db.execute(JOBS_BY_DOMAIN).fetchall())
        return {str(row[0]): int(row[1]) for row in rows}
