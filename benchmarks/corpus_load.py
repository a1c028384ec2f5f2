"""The search benchmark's corpus in its database: the run's folder, the topics and queries embedded
(cached for --reuse), the rows generated and COPYed unless --reuse finds them loaded."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from benchmarks import corpus as cp
from benchmarks import database as db
from benchmarks.options import Options
from benchmarks.progress import Progress
from benchmarks.stats import summarize


@dataclass
class Corpus:
    """What the measurements need from the corpus: layout, queries, the collection."""

    layout: cp.Layout
    texts: list[str]
    vectors: np.ndarray
    collection_id: uuid.UUID


def data_root(opts: Options) -> tuple[Path, bool]:
    """The run's folder and whether it is temporary; world-traversable for the postgres user."""
    if opts.data_dir is not None:
        root, temporary = opts.data_dir.resolve(), False
    elif opts.reuse:
        root, temporary = Path(tempfile.gettempdir()) / f"ragoverlay-bench-{opts.spec().fingerprint()}", False
    else:
        root, temporary = Path(tempfile.mkdtemp(prefix="ragoverlay-bench-")), True
    marker = root / "corpus.json"
    if root.exists() and marker.exists() and not opts.reuse:
        shutil.rmtree(root)  # an old corpus in a named folder, and no --reuse: start over
    elif marker.exists() and json.loads(marker.read_text()).get("fingerprint") != opts.spec().fingerprint():
        shutil.rmtree(root)  # another corpus spec: rebuild
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    return root, temporary


def _cached_embeddings(cache: Path, spec: cp.CorpusSpec) -> tuple[np.ndarray, np.ndarray] | None:
    """Centres and query vectors saved by an earlier run of the same spec, or None."""
    if not cache.exists():
        return None
    with np.load(cache) as saved:
        if str(saved["fingerprint"]) != spec.fingerprint():
            return None
        return saved["centres"], saved["queries"]


async def embed_texts(
    spec: cp.CorpusSpec, text: cp.TextModel, cache: Path, progress: Progress
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Topic centres, query texts and query vectors (cached in the data folder for `--reuse`)."""
    texts, query_topics = cp.query_plan(spec, text)
    cached = _cached_embeddings(cache, spec)
    if cached is not None:
        return cached[0], texts, cached[1]
    from app.clients.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder(threads=max(1, min(4, os.cpu_count() or 1)))
    try:
        centre_texts = [s for t in range(spec.topics) for s in text.centre_texts(t, spec.seed)]
        progress.say(f"embedding {len(centre_texts)} topic descriptions and {len(texts)} queries locally")
        # the server embeds queries one by one through embed_query; so do we, for identical vectors
        queries = np.stack([await embedder.embed_query(q) for q in texts])
        centres = cp.topic_centres(
            await embedder.embed_documents(centre_texts), spec.topics, queries, query_topics
        )
    finally:
        await embedder.aclose()
    np.savez(cache, fingerprint=np.array(spec.fingerprint()), centres=centres, queries=queries)
    return centres, texts, queries


async def prepare_corpus(
    opts: Options, root: Path, dsn: str, superuser_dsn: str, conn: asyncpg.Connection, progress: Progress
) -> tuple[Corpus, dict[str, Any]]:
    """Generate and COPY the corpus unless `--reuse` finds it loaded; returns it and its facts."""
    spec = opts.spec()
    marker = root / "corpus.json"
    with progress.phase("corpus: text model"):
        layout = cp.make_layout(spec)
        text = cp.TextModel(cp.load_vocabulary(), spec.topics, spec.seed)
    with progress.phase("corpus: embed topics and queries"):
        centres, texts, qvecs = await embed_texts(spec, text, root / "embeddings.npz", progress)
    facts: dict[str, Any] = {
        **asdict(spec),
        "fingerprint": spec.fingerprint(),
        "file_size": summarize(layout.sizes.tolist()),
        "noise": {"alpha": cp.ALPHA, "beta": cp.BETA, "off_topic": cp.OFF_TOPIC},
    }
    existing = await db.collection_id_of(conn, opts.collection) if marker.exists() else None
    if existing is not None and await db.row_count(conn, existing) == spec.chunks:
        progress.say(f"reusing the loaded corpus in {root}")
        facts["reused"] = True
        return Corpus(layout, texts, qvecs, existing), facts
    facts["reused"] = False
    with progress.phase("corpus: create rag_api tables"):
        collection_id = await db.create_schema(conn, opts.collection)
    vectors = cp.VectorModel(centres, spec.files, spec.seed)
    ranges = cp.batches(layout, opts.batch_rows)
    last_report = [0.0]

    def report_rows(done: int) -> None:
        now = time.perf_counter()
        if now - last_report[0] > 10 or done == spec.chunks:
            last_report[0] = now
            progress.say(f"  loaded {done:,} / {spec.chunks:,} rows")

    with progress.phase("corpus: generate + COPY"):
        loaded = await db.load_rows(
            dsn,
            collection_id,
            ranges,
            lambda first, last: cp.file_chunks(layout, text, vectors, first, last, spec.seed),
            parallel=opts.load_parallel,
            report=report_rows,
        )
    if loaded != spec.chunks:
        raise RuntimeError(f"loaded {loaded} rows, expected {spec.chunks}")
    if opts.gin:
        with progress.phase("corpus: langchain's GIN index on cmetadata"):
            await conn.execute(db.LANGCHAIN_GIN)
    # VACUUM (not only ANALYZE): sets hint bits and the visibility map as on a deployment that has
    # run for a while, and keeps autovacuum from starting in the middle of a measurement
    with progress.phase("corpus: VACUUM ANALYZE"):
        await conn.execute("VACUUM (ANALYZE) langchain_pg_embedding")
        await conn.execute("ANALYZE langchain_pg_collection")
    with progress.phase("corpus: CHECKPOINT"):
        await db.checkpoint(superuser_dsn)
    marker.write_text(json.dumps({"fingerprint": spec.fingerprint(), "collection": opts.collection}))
    return Corpus(layout, texts, qvecs, collection_id), facts
