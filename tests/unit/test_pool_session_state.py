"""Pool connections keep no session state, so the pool's release sends no reset query (db.keep_session).

What leaves state in a session (a session advisory lock, LISTEN, a session setting, a held cursor,
a temporary table, a prepared statement) may only appear in the files whose connections are their
own: each allowed file is named below with the connection it runs on. SQL lives in app/store (the
migrations run on bootstrap's own connection); a LISTEN through asyncpg (`add_listener`) anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"

SESSION_STATE = {
    "session advisory lock": re.compile(r"pg_(try_)?advisory_lock(_shared)?\s*\(", re.IGNORECASE),
    "LISTEN": re.compile(r"\bLISTEN\s+[\"'\w]|add_listener\("),
    "session setting (SET)": re.compile(r"[\"']\s*SET\s+(?!LOCAL\b)\w+\s*(=|TO\b)"),
    "session setting (set_config)": re.compile(r"set_config\([^)]*,\s*false\s*\)", re.IGNORECASE),
    "held cursor": re.compile(r"WITH\s+HOLD|\.cursor\("),
    "temporary table": re.compile(r"CREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\s+TABLE", re.IGNORECASE),
    "prepared statement (SQL)": re.compile(r"[\"']\s*PREPARE\s+\w+"),
}
# SQL files: a SET *statement* inside a function body ends with `;` (a function's own `SET` clause,
# restored when it returns, does not)
SQL_SET_STATEMENT = re.compile(r"^\s*SET\s+(?!LOCAL\b)[^;\n]*;", re.MULTILINE)

ALLOWED = {
    # the job worker's lease: a connection of its own (LISTEN, the jobs' session locks)
    "jobs/worker.py": {"LISTEN"},
    "store/sql/50_jobs.sql": {"session advisory lock"},
    # try_advisory_lock and dedicated_connection: for maintenance's own connections
    "store/db.py": {"session advisory lock", "session setting (SET)"},
    # the table's index-build lock and the polled schema lock: maintenance's dedicated connections,
    # and bootstrap's own for the migrations
    "store/build_lock.py": {"session advisory lock"},
    # the HNSW build: on a dedicated connection (MaintenanceStore, V2IndexTask)
    "store/vector_index.py": {"session setting (SET)", "session setting (set_config)"},
}


def _found(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    kinds = {kind for kind, pattern in SESSION_STATE.items() if pattern.search(text)}
    if path.suffix == ".sql" and SQL_SET_STATEMENT.search(text):
        kinds.add("session setting (SET)")
    return kinds


def test_session_state_appears_only_where_connections_are_their_own() -> None:
    offending = {}
    store = APP / "store"
    sql = [p for p in [*store.rglob("*.py"), *store.rglob("*.sql")] if "migrations" not in p.parts]
    listeners = [p for p in APP.rglob("*.py") if "add_listener(" in p.read_text(encoding="utf-8")]
    assert sql and listeners  # the scan reads the store's SQL and finds the worker's lease
    for path in sorted({*sql, *listeners}):
        name = path.relative_to(APP).as_posix()
        extra = _found(path) - ALLOWED.get(name, set())
        if extra:
            offending[name] = sorted(extra)
    # each allowance still names something its file does (else it goes)
    stale = {name: sorted(kinds - _found(APP / name)) for name, kinds in ALLOWED.items()}
    assert {name: kinds for name, kinds in stale.items() if kinds} == {}
    assert offending == {}, (
        "pool connections are released without a reset query (app/store/db.py keep_session): run "
        "session state on a connection of its own (dedicated_connection), or make it transaction-local"
    )


def test_the_check_sees_each_kind_of_session_state(tmp_path: Path) -> None:
    samples = {
        "a.py": 'await conn.execute("SELECT pg_advisory_lock(1)")',
        "b.py": 'await conn.execute("LISTEN jobs")',
        "c.py": "await conn.execute(\"SET work_mem = '1GB'\")",
        "d.py": "await conn.execute(\"SELECT set_config('work_mem', '1GB', false)\")",
        "e.py": "async with conn.transaction(): cur = await conn.cursor('SELECT 1')",
        "f.py": 'await conn.execute("CREATE TEMP TABLE t (x int)")',
        "g.py": 'await conn.execute("PREPARE q AS SELECT 1")',
        "h.sql": "BEGIN\n    SET enable_sort = off;\nEND;",
    }
    for name, text in samples.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert {name: len(_found(tmp_path / name)) for name in samples} == dict.fromkeys(samples, 1)
    # what leaves no session state is not reported
    clean = tmp_path / "clean.sql"
    clean.write_text(
        "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql\nSET enable_sort = off\nAS $$\nBEGIN\n"
        "    PERFORM set_config('hnsw.ef_search', '40', true);\n"
        "    PERFORM pg_advisory_xact_lock(1);\nEND;\n$$;\n",
        encoding="utf-8",
    )
    (tmp_path / "clean.py").write_text("await conn.execute(\"SET LOCAL work_mem = '1GB'\")", encoding="utf-8")
    assert _found(clean) == set()
    assert _found(tmp_path / "clean.py") == set()
