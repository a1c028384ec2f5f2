"""Schema and SQL code at start-up: numbered migrations applied once, SQL code files kept current.

Two kinds of files, both applied under one session advisory lock, so several replicas starting at
once apply each exactly once:
- migrations (`migrations/NNNN_name.sql`): tables, types, indexes and data changes, applied once
  and recorded in `ragoverlay_migrations`. A file whose first line is
  `-- ragoverlay: no-transaction` runs statement by statement outside a transaction (needed for
  CREATE INDEX CONCURRENTLY); an index such a statement left INVALID after a crash is dropped and
  rebuilt on the next run. Each such build, and each drop, holds its table's build lock
  (`build_lock.py`) like the maintenance builds, so it never runs beside another build of the table
  (two would deadlock) and never drops an index another session is still building.
- SQL code (`sql/NN_name.sql` here and evidence search's in `app/evidence/store/sql/`): functions
  and triggers, whose text is the truth. They are recorded with their checksum in
  `ragoverlay_sql_code`; when any file's checksum differs from the record, all of them are applied
  again, in name order across both folders, in one transaction (a changed type signature can then
  never leave a dependent function behind).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from app.store.build_lock import table_build_lock, wait_advisory_lock, wait_table_build_lock

logger = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "app.store.migrations"
# evidence search keeps its SQL beside its store code; the names share one order (NN_ prefixes)
CODE_PACKAGES = ("app.store.sql", "app.evidence.store.sql")
NO_TRANSACTION_MARKER = "-- ragoverlay: no-transaction"
_LOCK_KEY = 0x7261676F  # "rago": one constant key for the migration advisory lock
SCHEMA_POLL_SECONDS = 0.2  # how often a replica starting beside another tries the lock again
_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_CODE_RE = re.compile(r"^\d{2}_[a-z0-9_]+\.sql$")
# the table of a CREATE INDEX CONCURRENTLY statement (names of ours: plain identifiers)
_CONCURRENT_BUILD_RE = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s+"
    r"ON\s+(?:ONLY\s+)?(\w+)",
    re.IGNORECASE,
)


class SchemaError(RuntimeError):
    """A migration or SQL code file the database refused, with PostgreSQL's message and hint."""

    def __init__(self, what: str, exc: asyncpg.PostgresError) -> None:
        message = getattr(exc, "message", None) or str(exc)
        hint = getattr(exc, "hint", None)
        super().__init__(f"{what} failed: {message}" + (f". {hint}" if hint else ""))


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


@dataclass(frozen=True)
class CodeFile:
    """One SQL code file: functions and triggers, applied again whenever its text changes."""

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file text."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_code() -> list[CodeFile]:
    """All SQL code files shipped with the package, in the order they are applied (by name)."""
    found = [
        CodeFile(entry.name, entry.read_text(encoding="utf-8"))
        for package in CODE_PACKAGES
        for entry in resources.files(package).iterdir()
        if _CODE_RE.match(entry.name)
    ]
    names = [f.name for f in found]
    if len(names) != len(set(names)):
        raise RuntimeError("two SQL code files share a name")
    return sorted(found, key=lambda f: f.name)


def read_template(name: str) -> str:
    """A SQL template shipped next to the code files (e.g. `vec_walk.template.sql`)."""
    for package in CODE_PACKAGES:
        entry = resources.files(package).joinpath(name)
        if entry.is_file():
            return entry.read_text(encoding="utf-8")
    raise FileNotFoundError(f"no SQL template {name!r} in {', '.join(CODE_PACKAGES)}")


@dataclass(frozen=True)
class SchemaChanges:
    """What `prepare_schema` applied: migration versions and SQL code files."""

    migrations: list[int]
    code: list[str]


async def prepare_schema(conn: asyncpg.Connection) -> SchemaChanges:
    """Apply pending migrations, then the SQL code files if they changed, under the advisory lock.

    The lock is polled for, not waited for in PostgreSQL: the holder may be building an index
    CONCURRENTLY, whose last phase would wait for a waiting session's snapshot (a deadlock).
    """
    await wait_advisory_lock(
        conn, _LOCK_KEY, what="Another replica's schema preparation", poll=SCHEMA_POLL_SECONDS
    )
    try:
        migrations = await migrate(conn)
        code = await apply_code(conn)
        return SchemaChanges(migrations, code)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Apply pending migrations on `conn`; return the versions applied now.

    The caller holds the advisory lock (`prepare_schema`). Versions recorded by a database but
    shipped no more (0004 and 0007 held search functions, now SQL code) are left alone.
    """
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
        try:
            if mig.transactional:
                async with conn.transaction():
                    await conn.execute(mig.sql)
                    await _record(conn, mig)
            else:
                await drop_invalid_indexes(conn)
                for statement in split_statements(mig.sql):
                    await execute_outside_transaction(conn, statement)
                await _record(conn, mig)
        except asyncpg.PostgresError as exc:
            raise SchemaError(f"migration {mig.version:04d}_{mig.name}", exc) from exc
        done.append(mig.version)
    return done


CODE_RECORD_DDL = """
    CREATE TABLE IF NOT EXISTS ragoverlay_sql_code (
        name text PRIMARY KEY,
        checksum text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )
"""


async def apply_code(conn: asyncpg.Connection) -> list[str]:
    """Apply every SQL code file again when any differs from its record; return the names applied.

    The caller holds the advisory lock (`prepare_schema`). Records of generated code (the
    per-dimension index walks, `vector_index.ensure_walk`) are not files and are left alone.
    """
    await conn.execute(CODE_RECORD_DDL)
    files = load_code()
    recorded = {
        r["name"]: r["checksum"]
        for r in await conn.fetch("SELECT name, checksum FROM ragoverlay_sql_code")
        if _CODE_RE.match(r["name"])
    }
    wanted = {f.name: f.checksum for f in files}
    if recorded == wanted:
        return []
    async with conn.transaction():
        for code in files:
            logger.info("Applying SQL code %s", code.name)
            try:
                await conn.execute(code.sql)
            except asyncpg.PostgresError as exc:
                raise SchemaError(f"SQL code {code.name}", exc) from exc
        await conn.executemany(
            """
            INSERT INTO ragoverlay_sql_code (name, checksum) VALUES ($1, $2)
            ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
            """,
            list(wanted.items()),
        )
        gone = [name for name in recorded if name not in wanted]
        if gone:
            await conn.execute("DELETE FROM ragoverlay_sql_code WHERE name = ANY($1::text[])", gone)
    return [f.name for f in files]


async def code_checksum(conn: asyncpg.Connection, name: str) -> str | None:
    """The recorded checksum of generated SQL code `name`, or None."""
    await conn.execute(CODE_RECORD_DDL)
    value = await conn.fetchval("SELECT checksum FROM ragoverlay_sql_code WHERE name = $1", name)
    return str(value) if value is not None else None


async def record_code(conn: asyncpg.Connection, name: str, checksum: str) -> None:
    """Record generated SQL code `name` as applied with `checksum`."""
    await conn.execute(
        """
        INSERT INTO ragoverlay_sql_code (name, checksum) VALUES ($1, $2)
        ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
        """,
        name,
        checksum,
    )


async def _record(conn: asyncpg.Connection, mig: Migration) -> None:
    await conn.execute(
        "INSERT INTO ragoverlay_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        mig.version,
        mig.name,
        mig.checksum,
    )


def concurrent_build_table(statement: str) -> str | None:
    """The table a CREATE INDEX CONCURRENTLY statement builds on, or None for any other statement."""
    match = _CONCURRENT_BUILD_RE.match(statement)
    return match.group(1) if match else None


async def execute_outside_transaction(conn: asyncpg.Connection, statement: str) -> None:
    """Run one statement of a no-transaction migration; a concurrent build waits for its table's turn."""
    table = concurrent_build_table(statement)
    if table is None:
        await conn.execute(statement)
        return
    async with wait_table_build_lock(conn, table):
        await conn.execute(statement)


async def drop_invalid_indexes(conn: asyncpg.Connection) -> None:
    """Drop our indexes that a crashed CREATE INDEX CONCURRENTLY left invalid.

    An index is invalid while it is built too: one whose table's build lock another session holds
    may be that session's build (a maintenance task's, another replica's), and is left alone.
    """
    rows = await conn.fetch(
        """
        SELECT c.relname, t.relname AS table_name
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
        WHERE NOT i.indisvalid AND c.relname LIKE 'ragoverlay\\_%'
        """
    )
    for row in rows:
        async with table_build_lock(conn, row["table_name"]) as turn:
            if not turn:
                logger.info(
                    "Leaving invalid index %s: an index build on its table is running", row["relname"]
                )
                continue
            # read again under the lock: the build that held it may have just made it valid
            if not await conn.fetchval(
                "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(quote_ident($1))",
                row["relname"],
            ):
                continue
            logger.warning("Dropping invalid index %s left by an interrupted build", row["relname"])
            # the name comes from the catalogue and matched our own prefix; quote it anyway
            await conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{row["relname"]}"')
