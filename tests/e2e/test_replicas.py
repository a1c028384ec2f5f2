"""Two service replicas on one PostgreSQL primary (B also reads a streaming standby) and one S3 store.

Each replica is `scripts/serve` as a real process on its own port and `DATA_DIR`, with
`EMBEDDED_POSTGRES=false`, the same `JWT_SECRET`, the same bucket and prefix. The module starts the
primary and its standby (tests/fixtures/standby.py), the session's SeaweedFS and both replicas once,
the replicas at the same time (their migrations meet under the migration lock). Nothing is shared
between the replicas but PostgreSQL and S3: what one writes, the other must see at its next request.

    A: http://127.0.0.1:<a>   DATABASE_URL=primary
    B: http://127.0.0.1:<b>   DATABASE_URL=primary  DATABASE_READ_URLS=standby
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.fixtures.patience import ceiling, wait_until
from tests.fixtures.s3_server import S3Server
from tests.fixtures.serve import free_port, serving
from tests.fixtures.service import TEST_JWT_SECRET, auth, env_without_ragoverlay, new_id
from tests.fixtures.standby import StreamingPair, streaming_pair
from tests.integration.mcp_support import ACCEPT, PROTOCOL, initialize_body

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.s3]

METRICS_TOKEN = "replicas-test-" + "m" * 16
ADMIN = f"admin-{uuid.uuid4().hex[:8]}"
AGENT = f"agent_{uuid.uuid4().hex[:12]}"  # evidence search (/query_v2) is on for this namespace
REINDEX_RATE = 3  # REINDEX_RATE_PER_MINUTE on each replica


@dataclass
class Replica:
    """One running replica."""

    name: str
    base: str
    pid: int
    data_dir: Path

    def client(self) -> httpx.Client:
        """A client of this replica."""
        return httpx.Client(base_url=self.base, timeout=ceiling(120))

    def metric(self, name: str, **labels: str) -> float:
        """One sample of this replica's /metrics (0 when absent)."""
        r = httpx.get(
            f"{self.base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=ceiling(10)
        )
        assert r.status_code == 200, r.text
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        pattern = re.escape(f"{name}{{{wanted}}}" if labels else name) + r" ([0-9.e+-]+)$"
        found = re.search(pattern, r.text, re.M)
        return float(found.group(1)) if found else 0.0


@dataclass
class Cluster:
    """The two replicas, the primary and standby they use, and the S3 store."""

    a: Replica
    b: Replica
    pair: StreamingPair
    s3: S3Server
    prefix: str


def _replica_env(name: str, pair: StreamingPair, s3: S3Server, prefix: str, data_dir: Path) -> dict[str, str]:
    env = env_without_ragoverlay()
    env.update(
        {
            "RAG_PORT": str(free_port()),
            "RAG_HOST": "127.0.0.1",
            "DATA_DIR": str(data_dir),
            "EMBEDDED_POSTGRES": "false",
            "DATABASE_URL": pair.primary.dsn,
            "JWT_SECRET": TEST_JWT_SECRET,
            "S3_BUCKET": s3.bucket,
            "S3_ENDPOINT_URL": s3.endpoint_url,
            "S3_REGION": s3.region,
            "S3_ACCESS_KEY_ID": s3.access_key,
            "S3_SECRET_ACCESS_KEY": s3.secret_key,
            "S3_FORCE_PATH_STYLE": "true",
            "S3_PREFIX": prefix,
            "RAG_V2_NAMESPACE_IDS": AGENT,
            "RAG_ADMIN_USER_IDS": ADMIN,
            "METRICS_TOKEN": METRICS_TOKEN,
            "REINDEX_RATE_PER_MINUTE": str(REINDEX_RATE),
            # short chunks: a file past the vector cache's break-even (~900 rows) uploads in seconds
            "CHUNK_SIZE": "200",
            "CHUNK_OVERLAP": "0",
        }
    )
    if name == "b":
        env["DATABASE_READ_URLS"] = pair.standby_dsn
    return env


@pytest.fixture(scope="module")
def cluster(s3_server: S3Server) -> Iterator[Cluster]:
    """Primary + standby, then both replicas started at the same time; all stopped at the end."""
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-replicas-"))
    prefix = f"replicas-{uuid.uuid4().hex[:8]}/"
    try:
        with streaming_pair() as pair, contextlib.ExitStack() as stack:
            envs = {}
            for name in ("a", "b"):
                (root / name).mkdir()
                envs[name] = _replica_env(name, pair, s3_server, prefix, root / name)
            starts = [serving(envs[n], root / f"{n}.log", timeout_s=240) for n in ("a", "b")]
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                a_proc, b_proc = pool.map(stack.enter_context, starts)
            a, b = (
                Replica(n, f"http://127.0.0.1:{envs[n]['RAG_PORT']}", p.pid, root / n)
                for n, p in (("a", a_proc), ("b", b_proc))
            )
            yield Cluster(a, b, pair, s3_server, prefix)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def upload(client: httpx.Client, file_id: str, text: str, user: str, **form: str) -> dict[str, Any]:
    """A synchronous upload (LibreChat's); its answer."""
    r = client.post(
        "/embed",
        data={"file_id": file_id, **form},
        files={"file": (f"{file_id}.md", text.encode(), "text/markdown")},
        headers=auth(user),
    )
    assert r.status_code == 200 and r.json()["status"] is True, r.text
    body: dict[str, Any] = r.json()
    return body


def query(client: httpx.Client, text: str, file_id: str, user: str, **extra: Any) -> list[str]:
    """`/query` texts (LibreChat's one-file search)."""
    r = client.post("/query", json={"query": text, "file_id": file_id, "k": 5, **extra}, headers=auth(user))
    assert r.status_code == 200, r.text
    return [doc["page_content"] for doc, _ in r.json()]


def query_multiple(
    client: httpx.Client, text: str, file_ids: list[str], user: str, **extra: Any
) -> list[str]:
    """`/query_multiple` texts (the overlay's search); 404 is its "no results"."""
    body = {"query": text, "file_ids": file_ids, "k": 10, **extra}
    r = client.post("/query_multiple", json=body, headers=auth(user))
    if r.status_code == 404:
        return []
    assert r.status_code == 200, r.text
    return [doc["page_content"] for doc, _ in r.json()]


def test_an_upload_through_one_replica_is_found_through_the_other(cluster: Cluster) -> None:
    user = new_id("user")
    standby_reads = cluster.b.metric("ragoverlay_standby_reads_total", outcome="standby")
    with cluster.a.client() as a, cluster.b.client() as b:
        for writer, reader, tag in ((a, b, "a-to-b"), (b, a, "b-to-a")):
            file_id, word = new_id(tag), f"cormorant{uuid.uuid4().hex[:6]}"
            upload(writer, file_id, f"The {word} colony nests on the western breakwater.", user)
            # the very next request through the other replica, no waiting
            assert any(word in t for t in query(reader, f"Where does the {word} nest?", file_id, user))
            assert any(word in t for t in query_multiple(reader, "breakwater colony", [file_id], user))
            ids = reader.get("/ids", headers=auth(user))
            assert ids.status_code == 200 and file_id in ids.json(), ids.text
    # B read on its standby (read-your-writes across replicas), else the standby proved nothing
    assert cluster.b.metric("ragoverlay_standby_reads_total", outcome="standby") > standby_reads


def _logbook(lines: int) -> str:
    """A long logbook: one paragraph (~170 characters) a chunk (CHUNK_SIZE=200), the storm in the middle."""
    days = [
        f"Day {n}: the keeper lit the lamp at dusk, wound the clockwork, trimmed the wick, polished the lens"
        f" and logged {n % 7} ships passing the reef before the tide turned."
        for n in range(lines)
    ]
    days[lines // 2] = "The lighthouse keeper recorded a storm that lasted nine days."
    return "\n\n".join(days)


def test_a_replacement_or_delete_through_a_is_seen_by_bs_next_search(cluster: Cluster) -> None:
    """B's vector cache is its own: its revision check must catch what A changed.

    The cache serves scopes past the planner's break-even (~900 rows), so the file has 1,000 chunks,
    uploaded through B (B's statistics know its size; a file only A stored counts B's average).
    """
    user, file_id = new_id("user"), new_id("cache")
    cache = "ragoverlay_vector_cache_events_total"
    with cluster.a.client() as a, cluster.b.client() as b:
        upload(b, file_id, _logbook(1000), user)
        loaded = cluster.b.metric(cache, event="loaded")

        def held_by_b() -> bool:
            assert any("nine days" in t for t in query(b, "How long did the storm last?", file_id, user))
            return cluster.b.metric(cache, event="loaded") > loaded

        # B serves from memory once it knows the vector copy is ready, whichever replica readied it
        wait_until(held_by_b, what="the file in B's vector cache", within_s=15)
        loaded = cluster.b.metric(cache, event="loaded")
        upload(a, file_id, "The new pier was built in 1972 from granite blocks.", user)
        for found in (
            query(b, "When was the pier built?", file_id, user),
            query_multiple(b, "When was the pier built?", [file_id], user),
        ):
            assert any("1972" in t for t in found) and not any("nine days" in t for t in found), found
        # B's cache saw the revision change and loaded the new version (else the search bypassed it)
        assert cluster.b.metric(cache, event="loaded") > loaded
        context = b.get(f"/documents/{file_id}/context", headers=auth(user))
        assert context.status_code == 200 and "1972" in context.text and "nine days" not in context.text
        r = a.request("DELETE", "/documents", json=[file_id], headers=auth(user))
        assert r.status_code == 200, r.text
        assert query(b, "When was the pier built?", file_id, user) == []
        assert query_multiple(b, "pier granite", [file_id], user) == []
        assert b.get(f"/documents/{file_id}/context", headers=auth(user)).status_code == 404


def _query_v2(client: httpx.Client, text: str, file_ids: list[str], user: str) -> httpx.Response:
    body = {"query": text, "file_ids": file_ids, "entity_id": AGENT, "k": 5}
    return client.post("/query_v2", json=body, headers=auth(user))


def _heater_manual(model: str, weight: int) -> str:
    return (
        f"# {model} heaters\n\n## Ratings\n\n| Model | Power (kW) | Weight (kg) |\n| --- | --- | --- |\n"
        f"| {model} | 2.8 | {weight} |\n"
    )


def test_query_v2_through_b_follows_uploads_replacements_and_deletes_through_a(cluster: Cluster) -> None:
    user, file_id = new_id("user"), new_id("manual")
    with cluster.a.client() as a, cluster.b.client() as b:
        upload(a, file_id, _heater_manual("K28", 12), user, entity_id=AGENT)

        def cited(client: httpx.Client, words: str) -> list[dict[str, Any]] | None:
            r = _query_v2(client, words, [file_id], user)
            if r.status_code == 503:  # the namespace's first backfill is not active yet
                return None
            assert r.status_code == 200, r.text
            results: list[dict[str, Any]] = r.json()["results"]
            return results or None

        first = wait_until(
            lambda: cited(b, "weight of the K28"), what="K28 through B's /query_v2", within_s=120
        )
        assert {r["file_id"] for r in first} == {file_id} and "12" in first[0]["content"], first
        replaced = upload(a, file_id, _heater_manual("K35", 14), user, entity_id=AGENT)

        # until the new version is staged B may answer degraded, never with the replaced text
        def new_version() -> list[dict[str, Any]] | None:
            # a question both versions answer (naming one model would refuse on the other)
            r = _query_v2(b, "What is the weight of the heater?", [file_id], user)
            assert r.status_code == 200, r.text
            assert not any("K28" in item["content"] for item in r.json()["results"]), r.text
            return r.json()["results"] if not r.json()["degraded"] else None

        found = wait_until(new_version, what="the replacement through B's /query_v2", within_s=120)
        assert any("K35" in item["content"] for item in found), (found, replaced)
        assert a.request("DELETE", "/documents", json=[file_id], headers=auth(user)).status_code == 200
        gone = _query_v2(b, "What is the weight of the heater?", [file_id], user)
        assert gone.status_code == 200 and gone.json()["results"] == [], gone.text


def test_a_user_of_one_namespace_never_reaches_anothers_files_across_replicas(cluster: Cluster) -> None:
    """Y's files go in through A; X asks through B (its standby) every way a caller can name them."""
    x, y = new_id("user-x"), new_id("user-y")
    fx, fy = new_id("x-file"), new_id("y-file")
    with cluster.a.client() as a, cluster.b.client() as b:
        upload(a, fy, "The vault combination is written on the back of the harbour map.", y)
        upload(b, fx, "The harbour map shows three piers and a lighthouse.", x)
        job = a.post(
            "/embed?async=true",
            data={"file_id": new_id("y-job")},
            files={"file": ("y.md", b"The second vault holds the ledgers.", "text/markdown")},
            headers=auth(y),
        )
        assert job.status_code == 202, job.text
        assert query(b, "vault combination", fy, x) == []
        # a forged list: X's own file answers, Y's adds nothing
        found = query_multiple(b, "harbour map vault combination", [fy, fx], x)
        assert found and not any("vault" in t for t in found), found
        assert query_multiple(b, "vault combination", [fy], x) == []
        for path in (f"/documents?ids={fy}", f"/documents/{fy}/context"):
            assert b.get(path, headers=auth(x)).status_code == 404, path
        assert fy not in b.get("/ids", headers=auth(x)).json()
        # another user's id as entity_id is not an Agent id: refused, never a widening
        r = b.post("/query", json={"query": "vault", "file_id": fy, "entity_id": y}, headers=auth(x))
        assert r.status_code == 400, r.text
        r = b.post(
            "/query_v2", json={"query": "vault", "file_ids": [fy], "entity_id": AGENT}, headers=auth(x)
        )
        assert r.status_code in (200, 503) and not (r.status_code == 200 and r.json()["results"]), r.text
        other_agent = f"agent_{uuid.uuid4().hex[:12]}"  # not in RAG_V2_NAMESPACE_IDS
        r = b.post(
            "/query_v2", json={"query": "vault", "file_ids": [fy], "entity_id": other_agent}, headers=auth(x)
        )
        assert r.status_code == 403, r.text
        assert b.get(f"/jobs/{job.json()['job_id']}", headers=auth(x)).status_code == 404
        assert b.request("DELETE", "/documents", json=[fy], headers=auth(x)).status_code == 404
        # and Y still has it, through either replica
        assert any("vault" in t for t in query(a, "vault combination", fy, y))
        assert any("vault" in t for t in query(b, "vault combination", fy, y))


def admin_job(client: httpx.Client, job_id: int) -> dict[str, Any]:
    """The admin's view of a job."""
    r = client.get(f"/admin/jobs/{job_id}", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    row: dict[str, Any] = r.json()
    return row


def test_async_uploads_to_a_are_claimed_by_either_replica_each_once(cluster: Cluster) -> None:
    user = new_id("user")
    jobs: list[int] = []
    claimers: set[int] = set()

    def submit_and_count() -> bool:
        def one(n: int) -> int:
            with cluster.a.client() as a:
                r = a.post(
                    "/embed?async=true",
                    data={"file_id": new_id(f"ledger-{n}")},
                    files={
                        "file": (f"ledger-{n}.md", f"Entry {n}: {n} boats came in.".encode(), "text/markdown")
                    },
                    headers=auth(user),
                )
            assert r.status_code == 202, r.text
            return int(r.json()["job_id"])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            batch = list(pool.map(one, range(8)))
        jobs.extend(batch)
        with cluster.a.client() as a:
            for job_id in batch:

                def ended(job_id: int = job_id) -> dict[str, Any] | None:
                    row = admin_job(a, job_id)
                    return row if row["status"] in ("done", "failed") else None

                row = wait_until(ended, what=f"job {job_id}", within_s=60)
                assert (row["status"], row["attempts"], row["runs"]) == ("done", 1, 1), row
                claimers.add(int(row["worker"].split(":")[-2]))  # host:pid:id
        return len(claimers) == 2

    wait_until(submit_and_count, what="upload jobs claimed by both replicas", within_s=180)
    assert claimers == {cluster.a.pid, cluster.b.pid}
    with cluster.a.client() as a, cluster.b.client() as b:
        for job_id in jobs:
            seen_a = a.get(f"/jobs/{job_id}", headers=auth(user))
            seen_b = b.get(f"/jobs/{job_id}", headers=auth(user))
            assert seen_a.status_code == seen_b.status_code == 200, (seen_a.text, seen_b.text)
            assert seen_a.json() == seen_b.json()


async def _periodic_jobs(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(
            await conn.fetch(
                "SELECT dedupe_key, count(*) AS n, array_agg(DISTINCT worker) AS workers"
                " FROM ragoverlay_jobs WHERE period_s IS NOT NULL GROUP BY dedupe_key"
            )
        )
    finally:
        await conn.close()


async def _indexes(dsn: str) -> tuple[list[str], list[str], int]:
    """Invalid indexes, indexes defined twice (under two names), and HNSW indexes of the vector copy."""
    conn = await asyncpg.connect(dsn)
    try:
        invalid = await conn.fetch(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE NOT i.indisvalid"
        )
        twice = await conn.fetch(
            r"SELECT regexp_replace(indexdef, 'INDEX \S+ ON', 'INDEX ON') AS def FROM pg_indexes"
            " WHERE schemaname = 'public' GROUP BY 1 HAVING count(*) > 1"
        )
        hnsw = await conn.fetchval(
            "SELECT count(*) FROM pg_indexes"
            " WHERE tablename = 'ragoverlay_vectors' AND indexdef ILIKE '%USING hnsw%'"
        )
        return [r["relname"] for r in invalid], [r["def"] for r in twice], int(hnsw)
    finally:
        await conn.close()


def test_maintenance_and_index_builds_run_once_across_replicas(cluster: Cluster) -> None:
    """Both replicas registered every maintenance task: one periodic job each, whoever runs a pass;
    both wanted the 384-dimension HNSW index of the vector copy: it was built once, and no build
    was cancelled half-way (an invalid index is what two concurrent builds on one table leave)."""
    dsn = cluster.pair.primary.superuser_dsn
    rows = asyncio.run(_periodic_jobs(dsn))
    assert rows, "no periodic maintenance job"
    assert all(row["n"] == 1 for row in rows), [dict(r) for r in rows]
    assert any(row["dedupe_key"].endswith("hnsw-index-384") for row in rows), [dict(r) for r in rows]
    wait_until(lambda: asyncio.run(_indexes(dsn))[2] == 1, what="the vector copy's HNSW index", within_s=60)
    invalid, twice, _ = asyncio.run(_indexes(dsn))
    assert (invalid, twice) == ([], []), (invalid, twice)
    # two reindex requests for one namespace at once, one through each replica: one waiting job
    with cluster.a.client() as a, cluster.b.client() as b:
        owner, manual = new_id("user"), new_id("manual")
        upload(a, manual, _heater_manual("K50", 20), owner, entity_id=AGENT)
        # B remembers the namespace's active run now; the reindex through both activates another
        wait_until(lambda: _v2_rows(b, manual, owner), what="K50 through B's /query_v2", within_s=120)
        before = _active_run(a)

        def reindex(client: httpx.Client) -> dict[str, Any]:
            r = client.post(f"/admin/reindex?namespace={AGENT}", headers=auth(ADMIN))
            assert r.status_code == 202, r.text
            body: dict[str, Any] = r.json()
            return body

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first, second = pool.map(reindex, (a, b))
        ids = {first["job"]["id"], second["job"]["id"]}
        if len(ids) == 2:  # the first was claimed before the second arrived: never two waiting at once
            one, two = sorted((first["job"], second["job"]), key=lambda j: j["id"])
            assert admin_job(a, one["id"])["started_at"] <= two["created_at"], (one, two)
        else:
            assert [first["created"], second["created"]].count(True) == 1, (first, second)
        for job_id in ids:
            row = wait_until(
                lambda job_id=job_id: (r := admin_job(b, job_id))["status"] in ("done", "failed") and r,
                what=f"reindex job {job_id}",
                within_s=120,
            )
            assert (row["status"], row["runs"]) == ("done", 1), (row["error"], row["result"])
        wait_until(lambda: _active_run(a) != before, what="the reindexed run to be active", within_s=120)
        # B's remembered run is no longer the active one: its next question finds that out
        assert any("K50" in r["content"] for r in _v2_rows(b, manual, owner)), "B lost the file"
        # and it asked the new run (else an old run still holding the file would pass the line above)
        assert _answering_run(b, manual) == _active_run(a) != before


def _active_run(client: httpx.Client) -> int | None:
    """The run that answers AGENT's questions now (the admin's /v2/status)."""
    r = client.get("/v2/status", headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return next((run["run_id"] for run in r.json()["active_runs"] if run["namespace"] == AGENT), None)


def _answering_run(client: httpx.Client, file_id: str) -> int:
    """The run a `/query_v2` read (its debug output, for an admin)."""
    body = {"query": "heater weight", "file_ids": [file_id], "entity_id": AGENT, "debug": True}
    r = client.post("/query_v2", json=body, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return int(r.json()["debug"]["run"]["run_id"])


def _v2_rows(client: httpx.Client, file_id: str, user: str) -> list[dict[str, Any]]:
    """`/query_v2`'s results for the heater's weight in `file_id`, when not degraded."""
    r = _query_v2(client, "What is the weight of the heater?", [file_id], user)
    if r.status_code == 503:  # the namespace's first run is not active yet
        return []
    assert r.status_code == 200, r.text
    return [] if r.json()["degraded"] else list(r.json()["results"])


def test_rate_limits_are_per_replica(cluster: Cluster) -> None:
    """REINDEX_RATE_PER_MINUTE=3 on each replica: one client gets 3 from A and 3 more from B."""
    boss = auth(new_id("boss"), role="ADMIN")  # a client of its own: fresh buckets
    with cluster.a.client() as a, cluster.b.client() as b:
        for client in (a, b):
            codes = [
                client.post(f"/admin/reindex?namespace={AGENT}", headers=boss).status_code
                for _ in range(REINDEX_RATE + 1)
            ]
            assert codes == [202] * REINDEX_RATE + [429], codes


def test_an_mcp_session_lives_in_the_replica_that_opened_it(cluster: Cluster) -> None:
    """`/mcp` sessions are held by the process that opened them: another replica answers 404 (MCP's
    unknown session, after which a client opens a new one), so a balancer routes `/mcp` by
    `Mcp-Session-Id` (docs/scale-out.md)."""
    headers = {**ACCEPT, **auth(new_id("user"))}
    with cluster.a.client() as a, cluster.b.client() as b:
        opened = a.post("/mcp", json=initialize_body(), headers=headers)
        assert opened.status_code == 200, opened.text
        session = {
            **headers,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": PROTOCOL,
        }
        note = a.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        assert note.status_code == 202, note.text
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        assert a.post("/mcp", json=listing, headers=session).status_code == 200
        assert b.post("/mcp", json=listing, headers=session).status_code == 404
        # a new session through B works at once
        assert b.post("/mcp", json=initialize_body(), headers=headers).status_code == 200
