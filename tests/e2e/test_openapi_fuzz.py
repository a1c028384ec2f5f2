"""A short schemathesis run against `scripts/serve` over HTTP: the OpenAPI document is the truth.

schemathesis reads `/openapi.json` and sends schema-valid and schema-violating requests to every
operation with a valid token. The run must produce no 5xx, no status code, content type or body the
document does not list for that operation, no 405 without the right `Allow` list (unsupported_method,
and our own probe of every path with each method it lacks: `Allow` must name every method the path
has), and every request the schema forbids must be refused
(JSON bodies and URLs; see CONFIG for the multipart routes).
The HAR report is read back to count requests and statuses, so the figures are checked here too.
A fixed seed keeps the run reproducible (set RAGOVERLAY_FUZZ_SEED to explore others); the longer
run by hand is `st run` with the same options and `--max-examples 100` or more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from tests.fixtures.patience import ceiling, out_of_time, wait_until
from tests.fixtures.serve import free_port, serving
from tests.fixtures.service import TEST_JWT_SECRET, Database, env_without_ragoverlay, make_token

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The checks, as a schemathesis config file. Multipart fields are strings on the wire, so a mutation
# "file_id became a boolean" arrives as the string "false" and an empty array as no field at all: the
# same bytes as a valid request. Schema-violation checks on the multipart routes would only report
# that (a long run found exactly these three cases and nothing else); their refusals are pinned by
# the contract tests instead.
CONFIG = """
[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_schema_conformance.enabled = true
negative_data_rejection.enabled = true
unsupported_method.enabled = true

[[operations]]
include-path-regex = "^/(embed|embed-upload|text)$"
checks.negative_data_rejection.enabled = false
"""
MAX_EXAMPLES = 4
FUZZ_USER = "fuzz-user"
SEED = os.environ.get("RAGOVERLAY_FUZZ_SEED", "20261201")


def schemathesis_command(base: str, token: str, report_dir: Path) -> list[str]:
    """The `st run` command line (the same one, with more examples, makes the longer run)."""
    st = Path(sys.executable).parent / "st"
    config = report_dir.parent / "schemathesis.toml"
    config.write_text(CONFIG)
    return [
        str(st),
        "--config-file",
        str(config),
        "run",
        f"{base}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--phases",
        "coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        SEED,
        "--workers",
        "1",
        "--request-timeout",
        str(round(ceiling(60))),
        "--report",
        "har",
        "--report-dir",
        str(report_dir),
    ]


def wait_for_v2_index(base: str, token: str, seconds: float = 120.0) -> None:
    """Upload one file as the fuzzing user and wait until /query_v2 reads its V2 index run."""
    headers = {"Authorization": f"Bearer {token}"}
    r = httpx.post(
        f"{base}/embed",
        data={"file_id": "fuzz-seed"},
        files={"file": ("seed.txt", b"The seed file of the fuzzing run mentions kites.", "text/plain")},
        headers=headers,
        timeout=ceiling(120),
    )
    assert r.status_code == 200, r.text

    def index_answers() -> bool:
        r = httpx.post(
            f"{base}/query_v2",
            json={"query": "kites", "file_ids": ["fuzz-seed"]},
            headers=headers,
            timeout=ceiling(60),
        )
        assert r.status_code in (200, 503), r.text  # 503: the run is not active yet
        return r.status_code == 200

    wait_until(index_answers, what="the fuzzing user's V2 index run", within_s=seconds, every_s=0.5)


def openapi_document(base: str) -> dict:
    """GET /openapi.json: its first answer builds the document (and shares the CPU with the model's
    warm-up), so it may take a while on a busy machine; a time-out says it was time."""
    limit = ceiling(60)
    try:
        document: dict = httpx.get(f"{base}/openapi.json", timeout=limit).json()
    except httpx.TimeoutException:
        pytest.fail(out_of_time("the first GET /openapi.json", limit))
    return document


def _with_database(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def own_database(database: Database) -> Iterator[str]:
    """A fresh database on the session's server, for the service under fuzzing alone.

    Not the session database: the vector copy and its HNSW index are shared by every collection of
    a database, and thousands of fuzzed uploads would change what other tests' index paths find.
    """
    name = f"fuzz_{uuid.uuid4().hex[:12]}"
    owner = urlsplit(database.dsn).username

    async def create() -> None:
        conn = await asyncpg.connect(database.superuser_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        finally:
            await conn.close()
        conn = await asyncpg.connect(_with_database(database.superuser_dsn, name))
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        finally:
            await conn.close()

    async def drop() -> None:
        conn = await asyncpg.connect(database.superuser_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(create())
    try:
        yield _with_database(database.dsn, name)
    finally:
        asyncio.run(drop())


def operation_of(method: str, path: str, document: dict) -> tuple[str, str] | None:
    """The OpenAPI operation a concrete request path belongs to."""
    for template, operations in document["paths"].items():
        pattern = "^" + re.sub(r"\\{[^/]+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            return method.lower(), template
    return None


PROBED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def wrong_allow_headers(base: str, token: str, document: dict) -> list[str]:
    """Send every path of the document each method it lacks: each must answer 405 naming all it has.

    The expected set is every documented method of every path template the concrete path matches
    (RFC 9110: `Allow` lists the full set). Before, `OPTIONS /documents` said `Allow: GET` (DELETE
    exists) and `OPTIONS /v2/runs` `Allow: POST` (GET exists); schemathesis's own check let it pass.
    """
    wrong: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=ceiling(60)) as client:
        for template in document["paths"]:
            path = re.sub(r"\{[^/]+\}", "1", template)
            expected = {
                method.upper()
                for method in PROBED_METHODS
                if operation_of(method, path, document) is not None
            }
            for method in sorted(set(PROBED_METHODS) - expected):
                answer = client.request(method, path)
                allow = {m.strip() for m in answer.headers.get("allow", "").split(",") if m.strip()}
                if answer.status_code != 405 or allow != expected:
                    got = f"{answer.status_code}, Allow {sorted(allow)}"
                    wrong.append(f"{method} {path}: {got}, expected 405, Allow {sorted(expected)}")
    return wrong


def test_schemathesis_finds_no_5xx_and_no_undocumented_status(database: Database) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="ragoverlay-fuzz-"))
    data_dir.chmod(0o755)
    port = free_port()
    env = {
        k: v
        for k, v in env_without_ragoverlay().items()
        if not k.startswith(("DATABASE_", "EMBEDDINGS_", "S3_", "COLLECTION_"))
    }
    env.update(
        {
            "RAG_PORT": str(port),
            "RAG_HOST": "127.0.0.1",
            "DATA_DIR": str(data_dir),
            "JWT_SECRET": TEST_JWT_SECRET,
            # /query_v2 for the fuzzing user's own namespace (its upload below builds the index)
            "RAG_V2_NAMESPACE_IDS": FUZZ_USER,
        }
    )
    base = f"http://127.0.0.1:{port}"
    report_dir = data_dir / "report"
    try:
        # the session's PostgreSQL server (no second embedded server to start), a database of its own
        with (
            own_database(database) as dsn,
            serving({**env, "DATABASE_URL": dsn}, data_dir / "serve.log", timeout_s=240),
        ):
            document = openapi_document(base)
            token = make_token(FUZZ_USER, ttl=3600)
            wrong_allow = wrong_allow_headers(base, token, document)
            wait_for_v2_index(base, token)
            run = subprocess.run(
                schemathesis_command(base, token, report_dir),
                capture_output=True,
                text=True,
                timeout=ceiling(300),
                check=False,
                cwd=data_dir,  # schemathesis keeps a `.schemathesis/` cache in its working folder
                env={**os.environ, "NO_COLOR": "1"},
            )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-6000:]
        (har_file,) = report_dir.glob("har-*.json")
        entries = json.loads(har_file.read_text())["log"]["entries"]
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    statuses: Counter[int] = Counter()
    undocumented: list[str] = []
    operations: set[tuple[str, str]] = set()
    for entry in entries:
        request, status = entry["request"], entry["response"]["status"]
        statuses[status] += 1
        op = operation_of(request["method"], urlsplit(request["url"]).path, document)
        if op is None:
            continue  # schemathesis also probes methods a path does not have (405)
        operations.add(op)
        if str(status) not in document["paths"][op[1]][op[0]]["responses"]:
            undocumented.append(f"{op[0].upper()} {op[1]} answered {status}")
    print(f"schemathesis: {len(operations)} operations, {len(entries)} requests, statuses {dict(statuses)}")
    assert not wrong_allow, wrong_allow
    assert len(operations) == sum(len(ops) for ops in document["paths"].values())
    assert len(entries) > 100  # a run that sent almost nothing would prove nothing
    assert not [s for s in statuses if s >= 500], statuses
    assert not undocumented, undocumented
