"""A small migration runner: numbered `NNNN_name.sql` files, applied once, recorded, idempotent.

Files are applied in order under a session advisory lock, so several replicas starting at once
apply each migration exactly once. A file whose first line is `-- ragoverlay: no-transaction` runs
statement by statement outside a transaction (needed for CREATE INDEX CONCURRENTLY); an index such
a statement left INVALID after a crash is dropped and rebuilt on the next run.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

logger = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "app.store.migrations"
NO_TRANSACTION_MARKER = "-- ragoverlay: no-transaction"
_LOCK_KEY = 0x7261676F  # "rago": one constant key for the migration advisory lock
_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file text, recorded to notice edits of applied migrations."""
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def transactional(self) -> bool:
        """False when the file asks to run outside a transaction."""
        return not self.sql.lstrip().startswith(NO_TRANSACTION_MARKER)


def load_migrations() -> list[Migration]:
    """All migration files shipped with the package, in version order."""
    found = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = _NAME_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(versions) != len(set(versions)):
        raise RuntimeError("two migration files share a version number")
    return found


def split_statements(sql: str) -> list[str]:
    """Split SQL on `;` at line ends, outside dollar-quoted bodies and comments."""
    statements: list[str] = []
    current: list[str] = []
    in_dollar = False
    for line in sql.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        # `$$` toggles a function body; statements inside it end with `;` too
        if stripped.count("$$") % 2 == 1:
            in_dollar = not in_dollar
        if not in_dollar and stripped.endswith(";"):
            statements.append("\n".join(current).strip())
            current = []
    if current and "\n".join(current).strip():
        statements.append("\n".join(current).strip())
    return statements


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Apply pending migrations on `conn`; return the versions applied now."""
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS ragoverlay_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        applied = {
            r["version"]: r["checksum"]
            for r in await conn.fetch("SELECT version, checksum FROM ragoverlay_migrations")
        }
        done: list[int] = []
        for mig in load_migrations():
            if mig.version in applied:
                if applied[mig.version] != mig.checksum:
                    logger.warning("Migration %04d_%s changed after it was applied", mig.version, mig.name)
                continue
            logger.info("Applying migration %04d_%s", mig.version, mig.name)
            if mig.transactional:
                async with conn.transaction():
                    await conn.execute(mig.sql)
                    await _record(conn, mig)
            else:
                await _drop_invalid_indexes(conn)
                for statement in split_statements(mig.sql):
                    await conn.execute(statement)
                await _record(conn, mig)
            done.append(mig.version)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


async def _record(conn: asyncpg.Connection, mig: Migration) -> None:
    await conn.execute(
        "INSERT INTO ragoverlay_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        mig.version,
        mig.name,
        mig.checksum,
    )


async def _drop_invalid_indexes(conn: asyncpg.Connection) -> None:
    """Drop our indexes that a crashed CREATE INDEX CONCURRENTLY left invalid."""
    rows = await conn.fetch(
        """
        SELECT c.relname
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE NOT i.indisvalid AND c.relname LIKE 'ragoverlay\\_%'
        """
    )
    for row in rows:
        logger.warning("Dropping invalid index %s left by an interrupted build", row["relname"])
        # the name comes from the catalogue and matched our own prefix; quote it anyway
        await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{row["relname"]}"')
