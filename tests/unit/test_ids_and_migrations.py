"""UUIDv7 chunk ids and the migration files (pure)."""

import itertools
import uuid

from app.store.ids import uuid7_batch
from app.store.migrate import load_migrations, split_statements


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
    assert migs[0].version == 1
    assert any(not m.transactional for m in migs)  # concurrent index builds


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
