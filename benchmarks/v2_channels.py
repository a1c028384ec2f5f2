"""`python -m benchmarks.v2_channels`: how long each /query_v2 channel's SQL takes on a large run.

    .venv/bin/python -m benchmarks.v2_channels                     # 20k visible chunks, 20k of another owner
    .venv/bin/python -m benchmarks.v2_channels --chunks 5000 --dsn postgresql://...

It starts an embedded PostgreSQL in a temporary folder (or uses `--dsn`), stores a run through
`insert_document` (documents of `--per-document` chunks of `--terms` words of real technical English,
the comment lines of the installed Python packages; every fourth chunk a table row "K <n>" with its
identifier entity; random vectors of `--dims`), the same amount again for another owner (so every
index holds rows the scope must skip), builds the dimension's HNSW index, and times each store
function of app/evidence/store/channels.py over the run's 1,000-file allow-list: median and 95th percentile of
`--repeat` calls after one warm-up. Query terms are picked by document frequency (the three most
common words that are not stopwords, three in ~1 % of the chunks, three in ~0.05 %). Random vectors
are the HNSW walk's worst case (no clusters). Nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from app.evidence.store import channels as search
from app.evidence.store import documents as document_store
from app.evidence.store import runs as run_store
from app.evidence.store import vectors as vector_store
from app.runtime.postgres import EmbeddedPostgres
from app.store.db import bootstrap
from app.store.scope import Scope
from app.store.vector_index import build_index, index_spec
from app.text.chunk_records import ChunkKind, ChunkPlace, ChunkRecord
from app.text.entities import Entity
from app.text.lexicon import STOPWORDS_DE, STOPWORDS_EN
from app.text.normalize import normalize


def comment_words() -> list[str]:
    """Real technical English: the words of the comment lines of the installed Python packages."""
    words: list[str] = []
    for path in sorted((Path(sys.prefix) / "lib").rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped.startswith("#"):
                continue
            tokens = stripped.lstrip("# ").split()
            if len(tokens) >= 4 and sum(t.isalpha() for t in tokens) / len(tokens) > 0.6:
                words.extend(tokens)
    return words


def document_chunks(
    rng: np.random.Generator, words: list[str], start: int, *, chunks: int, terms: int, dims: int
) -> list[document_store.ChunkRow]:
    rows = []
    for ordinal in range(chunks):
        at = (start + ordinal * terms) % max(len(words) - terms, 1)
        text = " ".join(words[at : at + terms])
        label = None
        entities: tuple[Entity, ...] = ()
        if ordinal % 4 == 3:  # every fourth chunk a table row "K <n>"
            label = f"K {int(rng.integers(1, 500))}"
            text = f"{label} {text}"
            entities = (Entity("identifier", label, normalize(label), 0, len(label)),)
        kind: ChunkKind = "table_row" if label else "prose"
        chunk = ChunkRecord(
            ordinal=ordinal,
            id=str(uuid.uuid4()),
            place=ChunkPlace(kind=kind, page=1 + ordinal // 3, section=("Section",), row_label=label),
            content=text,
            embed_text=text,
            search_text=normalize(text),
            tokens=terms,
            entities=entities,
        )
        rows.append(document_store.ChunkRow(chunk, rng.normal(size=dims).astype(np.float32)))
    return rows


async def load(
    conn: asyncpg.Connection,
    collection_id: uuid.UUID,
    owner: str,
    words: list[str],
    options: argparse.Namespace,
) -> tuple[int, list[str]]:
    """A run of `owner` with `--chunks` chunks in documents of `--per-document`; its id and files."""
    rng = np.random.default_rng(zlib.crc32(owner.encode()))
    start = int(rng.integers(0, len(words)))
    documents = options.chunks // options.per_document
    files = [f"{owner}-file-{i}" for i in range(documents)]
    run = await run_store.create_run(
        conn, collection_id, namespace=owner, index_version="v2", extractor_version="bench",
        embedding_model="bench:model", embedding_dim=options.dims, file_ids=files,
    )  # fmt: skip
    for i, file_id in enumerate(files):
        rows = document_chunks(
            rng, words, start + i * options.per_document * options.terms, chunks=options.per_document,
            terms=options.terms, dims=options.dims,
        )  # fmt: skip
        document = document_store.DocumentRow(
            file_id, owner, uuid.uuid4().hex * 2, "bench", "bench:model", "original", f"doc-{i}.pdf",
            f"Document {i}", document_number=f"AB-{i}",
        )  # fmt: skip
        async with conn.transaction():
            document_id = await document_store.insert_document(conn, collection_id, document, rows)
            await run_store.link_file(
                conn, run.run_id, file_id, document_id=document_id, source="original", linked=False,
                chunks=len(rows), fingerprints=(),
            )  # fmt: skip
    return run.run_id, files


async def pick_terms(conn: asyncpg.Connection, scope: Scope, run_id: int) -> dict[str, Any]:
    """Query terms by document frequency in the run: common, mid (~1 %), rare (~0.05 %), a typo."""
    rows = await conn.fetch(
        "SELECT t.term, count(*) AS df FROM ragoverlay_v2_postings t "
        "JOIN ragoverlay_v2_run_files rf ON rf.document_id = t.document_id AND rf.run_id = $1 "
        "WHERE length(t.term) >= 4 AND t.term ~ '^[a-z]+$' GROUP BY t.term ORDER BY 2 DESC, 1",
        run_id,
    )
    visible = await search.visible(conn, scope, run_id)
    stop = STOPWORDS_EN | STOPWORDS_DE
    ranked = [(r["term"], int(r["df"])) for r in rows if r["term"] not in stop]

    def near(share: float) -> list[str]:
        target = share * visible.chunks
        return [t for t, _ in sorted(ranked, key=lambda item: (abs(item[1] - target), item[0]))[:3]]

    rare = [t for t in near(0.0005) if len(t) >= 7] or near(0.0005)
    return {
        "common": [t for t, _ in ranked[:3]],
        "mid": near(0.01),
        "rare": near(0.0005),
        "typo": rare[0][:2] + rare[0][3:],  # one letter dropped
        "df": {t: df for t, df in ranked[:3]},
    }


async def timed(call: Callable[[], Awaitable[Any]], repeat: int) -> dict[str, Any]:
    await call()  # warm: plans cached, pages in memory
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    if isinstance(result, tuple):  # vector: (hits, path)
        result = result[0]
    size = len(result) if isinstance(result, list | dict) else 1
    return {
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        "rows": size,
    }


async def measure(dsn: str, options: argparse.Namespace) -> dict[str, Any]:
    info = await bootstrap(dsn, f"bench_{uuid.uuid4().hex[:8]}")
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    try:
        started = time.perf_counter()
        words = comment_words()
        run_id, files = await load(conn, info.collection_id, "owner-a", words, options)
        await load(conn, info.collection_id, "owner-b", words, options)
        load_s = time.perf_counter() - started
        await conn.execute("VACUUM ANALYZE ragoverlay_v2_postings")
        await conn.execute("VACUUM ANALYZE ragoverlay_v2_chunks")
        await conn.execute("ANALYZE")
        spec = index_spec(options.dims, vector_store.V2_CHUNK_INDEX)
        assert spec is not None
        started = time.perf_counter()
        await build_index(conn, spec, m=16, ef_construction=64, memory="256MB")
        index_s = time.perf_counter() - started
        scope = Scope.of(info.collection_id, ["owner-a"], file_ids=files)
        picks = await pick_terms(conn, scope, run_id)
        query = np.random.default_rng(9).normal(size=options.dims).astype(np.float32)
        visible = await search.visible(conn, scope, run_id)
        k1, b, repeat = 1.2, 0.75, options.repeat
        # the walk as the planner sends it for 50 hits (2 x 50 + 10 candidates)
        walk = search.VectorPlan("index", spec.function_name, 110, 110, 20_000)

        def lexical(terms: list[str], trigram: str | None = None) -> Callable[[], Awaitable[Any]]:
            return lambda: search.lexical(
                conn, scope, run_id, terms, k1=k1, b=b, limit=50, trigram_text=trigram
            )

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "visible": lambda: search.visible(conn, scope, run_id),
            "document_frequencies (6 terms)": lambda: search.document_frequencies(
                conn, scope, run_id, picks["common"] + picks["rare"]
            ),
            "lexical rare (3 terms)": lexical(picks["rare"]),
            "lexical mid (3 terms)": lexical(picks["mid"]),
            "lexical common (3 most frequent non-stopwords)": lexical(picks["common"]),
            "lexical 9 mixed terms": lexical(picks["common"] + picks["mid"] + picks["rare"]),
            "lexical + trigram (a rare word with a typo)": lexical([picks["typo"]], picks["typo"]),
            "lexical + trigram (k 123: BM25 fills the limit)": lexical(["k", "123"], "k 123"),
            "exact (1 key + 6 phrases)": lambda: search.exact(
                conn, scope, run_id, keys=["k 123"], limit=50,
                phrases=["k 123", "document 7", "ab 7", *picks["common"]],
            ),
            "vector exact": lambda: search.vector(
                conn, scope, run_id, query, limit=50, plan=search.VectorPlan("exact"),
            ),
            "vector hnsw": lambda: search.vector(conn, scope, run_id, query, limit=50, plan=walk),
        }  # fmt: skip
        figures = {name: await timed(call, repeat) for name, call in calls.items()}
        _, path = await search.vector(conn, scope, run_id, query, limit=50, plan=walk)
        figures["vector hnsw"]["path"] = path
        hits = await search.lexical(conn, scope, run_id, picks["mid"], k1=k1, b=b, limit=50)
        keys = [(h.document_id, h.ordinal) for h in hits]
        figures["chunk_details (50 keys)"] = await timed(
            lambda: search.chunk_details(conn, scope, run_id, keys), repeat
        )
        sizes = {
            r["name"]: r["bytes"]
            for r in await conn.fetch(
                "SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c "
                "WHERE c.relname IN ('ragoverlay_v2_postings', 'ragoverlay_v2_chunks')"
            )
        }
        postings = await conn.fetchval("SELECT count(*) FROM ragoverlay_v2_postings")
        return {
            "visible": {"documents": visible.documents, "chunks": visible.chunks,
                        "average_length": round(visible.average_length, 1)},
            "load_s": round(load_s, 1),
            "hnsw_build_s": round(index_s, 1),
            "postings_rows": postings,
            "table_mb": {k: round(v / 2**20, 1) for k, v in sizes.items()},
            "query_terms": {k: v for k, v in picks.items() if k != "df"},
            "channels": figures,
        }  # fmt: skip
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", help="an existing database (default: an embedded one in a temporary folder)")
    parser.add_argument(
        "--chunks", type=int, default=20_000, help="visible chunks (the same again of another owner)"
    )
    parser.add_argument("--per-document", type=int, default=20)
    parser.add_argument("--terms", type=int, default=120, help="words per chunk")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    options = parser.parse_args(argv)
    root: Path | None = None
    server: EmbeddedPostgres | None = None
    dsn = options.dsn
    if dsn is None:
        root = Path(tempfile.mkdtemp(prefix="ragoverlay-v2chan-"))
        root.chmod(0o755)
        server = EmbeddedPostgres(root / "postgres")
        dsn = server.start().dsn
    try:
        figures = asyncio.run(measure(dsn, options))
    finally:
        if server is not None:
            server.stop()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
