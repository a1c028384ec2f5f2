"""UUIDv7 chunk ids, the migration files and the SQL code files (pure)."""

import itertools
import uuid

from app.store.ids import uuid7_batch
from app.store.migrate import concurrent_build_table, load_code, load_migrations, split_statements
from app.store.vector_index import IndexSpec


def test_uuid7_batch_is_strictly_increasing_and_version_7() -> None:
    ids = uuid7_batch(10_000)  # crosses the 4,096-per-millisecond counter twice
    assert all(isinstance(i, uuid.UUID) and i.version == 7 for i in ids)
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len(set(ids)) == len(ids)
    later = uuid7_batch(3)
    assert ids[-1] < later[0]
    # the chunk-order SQL recognises our ids by the version digit at text position 15
    assert all(str(i)[14] == "7" for i in ids[:5])


def test_migrations_are_numbered_and_unique() -> None:
    migs = load_migrations()
    assert [m.version for m in migs] == sorted({m.version for m in migs})
    assert migs[0].version == 0 and migs[0].name == "extensions"  # before the tables that need them
    assert any(not m.transactional for m in migs)  # concurrent index builds
    # 0004 and 0007 held search functions (now SQL code): their numbers stay unused, so a database
    # that recorded them never skips a new migration
    assert not {4, 7} & {m.version for m in migs}


def test_migrations_hold_no_functions_and_code_files_no_tables() -> None:
    for mig in load_migrations():
        text = mig.sql.upper()
        assert "CREATE FUNCTION" not in text and "CREATE OR REPLACE FUNCTION" not in text, mig.name
        assert "CREATE TRIGGER" not in text, mig.name
    code = load_code()
    assert [c.name for c in code] == sorted(c.name for c in code)
    assert code[0].name == "00_retired.sql"
    for c in code:
        text = c.sql.upper()
        assert "CREATE TABLE" not in text and "CREATE INDEX" not in text, c.name


def test_every_read_and_delete_function_checks_the_scope() -> None:
    """A function that takes a scope must check rows with the one predicate (and nothing else)."""
    for c in load_code():
        if "p_scope ragoverlay_scope" in c.sql and c.name != "10_scope.sql":
            assert "ragoverlay_in_scope(p_scope," in c.sql, c.name
            assert "user_id') = ANY (p_owners)" not in c.sql, c.name
    walk = IndexSpec(384).function_sql
    assert "__DIMS__" not in walk and "ragoverlay_vec_walk_384(" in walk
    assert "ragoverlay_in_scope(p_scope, v.collection_id, v.file_id, v.owner)" in walk


def test_split_statements_respects_dollar_quotes() -> None:
    sql = """
    -- comment
    CREATE TABLE a (x int);
    CREATE FUNCTION f() RETURNS trigger AS $$
    BEGIN
      RETURN NEW;
    END;
    $$ LANGUAGE plpgsql;
    CREATE INDEX CONCURRENTLY i ON a (x);
    """
    parts = split_statements(sql)
    assert len(parts) == 3
    assert parts[1].startswith("CREATE FUNCTION") and parts[1].endswith("plpgsql;")


def test_each_concurrent_build_of_a_migration_names_its_table_for_the_build_lock() -> None:
    builds = [
        concurrent_build_table(statement)
        for mig in load_migrations()
        if not mig.transactional
        for statement in split_statements(mig.sql)
    ]
    # 0003's two indexes and 0012's: every statement of those files is such a build
    assert builds == ["langchain_pg_embedding"] * 3
    assert concurrent_build_table("create unique index concurrently ix on only t1 (a)") == "t1"
    assert concurrent_build_table("CREATE INDEX ix ON t1 (a)") is None  # not concurrent: no lock
    assert concurrent_build_table("DROP INDEX CONCURRENTLY IF EXISTS ix") is None
