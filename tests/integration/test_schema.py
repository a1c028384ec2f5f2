"""Migrations and SQL code at start-up, on databases of their own: fresh, upgraded, and locked down."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from app.store.db import bootstrap, dedicated_connection
from app.store.migrate import SchemaError, load_code, load_migrations, prepare_schema
from app.store.vector_index import IndexSpec, ensure_walk
from tests.fixtures.service import Database


def with_database(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


@asynccontextmanager
async def new_database(
    database: Database, *, owned: bool = True, extensions: tuple[str, ...] = ("vector",)
) -> AsyncIterator[str]:
    """A database of its own; `owned`: the service's role owns it (else it may only use `public`)."""
    name = f"schema_{uuid.uuid4().hex[:10]}"
    role = urlsplit(database.dsn).username
    su = await asyncpg.connect(database.superuser_dsn)
    try:
        await su.execute(f'CREATE DATABASE {name} OWNER "{role if owned else "postgres"}"')
        admin = await asyncpg.connect(with_database(database.superuser_dsn, name))
        try:
            for ext in extensions:
                await admin.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
            if not owned:
                await admin.execute(f'GRANT CREATE, USAGE ON SCHEMA public TO "{role}"')
        finally:
            await admin.close()
        yield with_database(database.dsn, name)
    finally:
        await su.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await su.close()


async def functions(conn: asyncpg.Connection, pattern: str) -> dict[str, str]:
    rows = await conn.fetch(
        "SELECT proname, pg_get_function_identity_arguments(oid) AS args FROM pg_proc "
        "WHERE proname LIKE $1 AND pronamespace = current_schema()::regnamespace",
        pattern,
    )
    return {r["proname"]: r["args"] for r in rows}


async def test_a_fresh_database_gets_everything_once(database: Database) -> None:
    async with new_database(database) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            first = await prepare_schema(conn)
            assert first.migrations == [m.version for m in load_migrations()]
            assert first.code == [c.name for c in load_code()]
            again = await prepare_schema(conn)
            assert (again.migrations, again.code) == ([], [])
            extensions = {r["extname"] for r in await conn.fetch("SELECT extname FROM pg_extension")}
            assert {"vector", "pg_trgm", "unaccent"} <= extensions
            found = await functions(conn, "ragoverlay%")
            assert {
                "ragoverlay_caller_scope",
                "ragoverlay_in_scope",
                "ragoverlay_nearest_chunks",
                "ragoverlay_documents",
                "ragoverlay_file_ids",
                "ragoverlay_delete_files",
                "ragoverlay_vectors_put",
            } <= set(found)
            assert await conn.fetchval("SELECT state FROM ragoverlay_vector_copy") == "backfilling"
        finally:
            await conn.close()


async def test_changed_code_is_applied_again_and_only_then(database: Database) -> None:
    async with new_database(database) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await prepare_schema(conn)
            await conn.execute("UPDATE ragoverlay_vector_copy SET state = 'ready'")
            # a function edited by hand (or an older text of the file): the record no longer matches
            await conn.execute(
                "CREATE OR REPLACE FUNCTION ragoverlay_in_scope(p_scope ragoverlay_scope, p_collection uuid, "
                "p_file_id text, p_owner text) "
                "RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'"
            )
            await conn.execute("UPDATE ragoverlay_sql_code SET checksum = 'old' WHERE name = '10_scope.sql'")
            await conn.execute("INSERT INTO ragoverlay_sql_code (name, checksum) VALUES ('99_gone.sql', 'x')")
            changes = await prepare_schema(conn)
            assert changes.code == [c.name for c in load_code()]  # all of them, in order
            body = await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = 'ragoverlay_in_scope'")
            assert "owners" in body
            names = {r["name"] for r in await conn.fetch("SELECT name FROM ragoverlay_sql_code")}
            assert names == {c.name for c in load_code()}
            # the triggers were re-created in place: the copy stays ready, no new backfill
            assert await conn.fetchval("SELECT state FROM ragoverlay_vector_copy") == "ready"
            assert (await prepare_schema(conn)).code == []
        finally:
            await conn.close()


async def test_a_database_of_the_unreleased_layout_is_taken_over(database: Database) -> None:
    """Migrations 0004 and 0007 recorded, their search functions and the retired V2 helpers present."""
    async with new_database(database) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await prepare_schema(conn)
            await conn.execute("DELETE FROM ragoverlay_sql_code")
            for version, name in [(4, "search_function"), (7, "search_function_v2")]:
                await conn.execute(
                    "INSERT INTO ragoverlay_migrations (version, name, checksum) VALUES ($1, $2, 'x')",
                    version,
                    name,
                )
            # stand-ins with the old names and signatures
            await conn.execute(
                "CREATE FUNCTION ragoverlay_search_v1(p_query vector, p_collection uuid) RETURNS int "
                "LANGUAGE sql AS 'SELECT 1'"
            )
            await conn.execute(
                "CREATE FUNCTION ragoverlay_search_v2(p_query vector, p_use_copy boolean) RETURNS int "
                "LANGUAGE sql AS 'SELECT 2'"
            )
            for retired in (
                "ragoverlay_v2_term_stats(p_run bigint, p_terms text[])",
                "ragoverlay_v2_any_terms(p_terms text[])",
            ):
                await conn.execute(
                    f"CREATE OR REPLACE FUNCTION {retired} RETURNS int LANGUAGE sql AS 'SELECT 3'"
                )
            await conn.execute(
                "CREATE FUNCTION ragoverlay_vec_walk_8(p_query vector, p_collection uuid, p_fileset jsonb, "
                "p_owners text[], p_legacy_unowned boolean, p_limit integer) RETURNS TABLE (id uuid) "
                "LANGUAGE sql AS 'SELECT NULL::uuid'"
            )
        finally:
            await conn.close()

        await bootstrap(dsn, "taken-over")  # no error

        conn = await asyncpg.connect(dsn)
        try:
            assert await functions(conn, "ragoverlay_search%") == {}
            assert await functions(conn, "ragoverlay_v2_term_stats") == {}
            assert await functions(conn, "ragoverlay_v2_any_terms") == {}
            # the walk of the old signature is replaced by the current one when its index is used
            assert await ensure_walk(conn, IndexSpec(8))
            walks = await functions(conn, "ragoverlay_vec_walk_8")
            assert walks == {
                "ragoverlay_vec_walk_8": "p_query vector, p_scope ragoverlay_scope, p_limit integer, "
                "p_ef_search integer, p_max_scan_tuples integer"
            }
            assert not await ensure_walk(conn, IndexSpec(8))  # current: left alone
        finally:
            await conn.close()


@pytest.mark.parametrize(
    ("extensions", "missing"),
    [((), "vector"), (("vector",), "pg_trgm")],
    ids=["vector", "pg_trgm"],
)
async def test_an_extension_the_role_may_not_create_is_named(
    database: Database, extensions: tuple[str, ...], missing: str
) -> None:
    async with new_database(database, owned=False, extensions=extensions) as dsn:
        with pytest.raises(SchemaError) as raised:
            await bootstrap(dsn, "locked")
        message = str(raised.value)
        assert "0000_extensions" in message
        assert f'extension "{missing}"' in message
        assert f"CREATE EXTENSION IF NOT EXISTS {missing};" in message
        assert "may not create it" in message


async def test_dedicated_connections_have_no_statement_timeout(database: Database) -> None:
    async with dedicated_connection(database.dsn) as conn:
        assert await conn.fetchval("SHOW statement_timeout") == "0"
        assert await conn.fetchval("SELECT '[1,2]'::vector") is not None  # the codec is registered


async def test_an_extension_the_server_does_not_have_is_named(database: Database) -> None:
    """The same migration text, asked for an extension no server has: the message says to install it."""
    sql = load_migrations()[0].sql.replace(
        "ARRAY['vector', 'pg_trgm', 'unaccent']", "ARRAY['ragoverlay_nope']"
    )
    assert "ragoverlay_nope" in sql
    conn = await asyncpg.connect(database.dsn)
    try:
        with pytest.raises(asyncpg.RaiseError) as raised:
            await conn.execute(sql)
        assert 'extension "ragoverlay_nope", which this server does not have installed' in str(raised.value)
        assert "contrib" in (raised.value.hint or "")
    finally:
        await conn.close()
