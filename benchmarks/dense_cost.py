"""`python -m benchmarks.dense_cost`: ingestion CPU of one dense representation against two (issue 37).

    .venv/bin/python -m benchmarks.dense_cost              # Debian Reference: en HTML, en and de PDF pages
    .venv/bin/python -m benchmarks.dense_cost FILE...

For each file, in this process and with the service's own code and default settings (the offline
model): the parse (`load_document`, as V1's upload parses), V1's chunks (`split_sections` and
`clean_text`, rag_api's 1,500 characters) and their vectors (`embed_documents`, 256-token windows
pooled), the evidence chunks (`clean_document` and the chunker, as a V2 job makes them) and their
vectors (`embed_texts`), the overlap of V1 and evidence chunks (benchmarks/quality/natural/dense.py,
for (B) and (C)) and the pooled V1 vectors of (C). Each stage is timed in CPU seconds of this process
(`time.process_time`: every thread, the model's included), not wall time, so that a busy machine
changes the figures little. Then per file and in all:

    V1 alone   parse + V1 chunks + V1 vectors
    (A) today  V1 alone + a second parse + evidence chunks + evidence vectors
    (B)        V1 alone + evidence chunks + the overlap (one parse, no evidence vector)
    (C)        parse + V1 chunks + evidence chunks + evidence vectors + the overlap + pooling
    (D)        (C) with vectors for the evidence chunks that are not table rows only
    (D1)       (D) pooled strictly (`dense_rows.py`: prose-strict-own): V1 chunks holding no prose
               chunk embedded on their own; each table row given its V1 chunk's vector (the mapping)

Storing (PostgreSQL's CPU, another process) is left out of every row alike. (A) counts the second
parse as today's V2 job does when the kept parse is gone; with it kept, (A) is lower by one parse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
DEBIAN_REFERENCE = Path("/usr/share/debian-reference")
DEFAULT_HTML = ("ch01.en.html", "ch02.en.html", "ch03.en.html")
DEFAULT_PDFS = ("debian-reference.en.pdf", "debian-reference.de.pdf")


@dataclass
class FileCost:
    """CPU seconds per stage of one file, and what it made."""

    name: str
    pages: int
    v1_chunks: int
    evidence_chunks: int
    v1_tokens: int  # the model's tokens V1's texts hold (special tokens left out)
    evidence_tokens: int
    parse_s: float
    v1_chunk_s: float
    v1_embed_s: float
    evidence_chunk_s: float
    evidence_embed_s: float
    prose_embed_s: float  # the evidence chunks that are not table rows, embedded on their own
    overlap_s: float
    pool_s: float
    unmapped: int = 0  # evidence chunks in no V1 chunk: (B) never scores them
    empty_v1: int = 0  # V1 chunks holding no evidence chunk: (C) leaves them without a vector
    own_chunks: int = 0  # (D1): V1 chunks holding no prose chunk, embedded on their own
    own_embed_s: float = 0.0
    strict_pool_s: float = 0.0  # (D1): pooling the prose chunks only
    map_s: float = 0.0  # (D1): each row's V1 chunk and its vector

    def rows(self) -> dict[str, float]:
        """CPU seconds of V1 alone and of each candidate (module docstring)."""
        v1 = self.parse_s + self.v1_chunk_s + self.v1_embed_s
        return {
            "V1 alone": v1,
            "(A) today": v1 + self.parse_s + self.evidence_chunk_s + self.evidence_embed_s,
            "(B) V1 vectors": v1 + self.evidence_chunk_s + self.overlap_s,
            "(C) pooled": self.parse_s
            + self.v1_chunk_s
            + self.evidence_chunk_s
            + self.evidence_embed_s
            + self.overlap_s
            + self.pool_s,
            "(D) prose vectors": self.parse_s
            + self.v1_chunk_s
            + self.evidence_chunk_s
            + self.prose_embed_s
            + self.overlap_s
            + self.pool_s,
            "(D1) rows inherit": self.parse_s
            + self.v1_chunk_s
            + self.evidence_chunk_s
            + self.prose_embed_s
            + self.overlap_s
            + self.own_embed_s
            + self.strict_pool_s
            + self.map_s,
        }


def _cpu(call: Callable[[], T]) -> tuple[T, float]:
    t0 = time.process_time()
    value = call()
    return value, time.process_time() - t0


async def _acpu(call: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.process_time()
    value = await call()
    return value, time.process_time() - t0


async def measure(path: Path, embedder: Any, settings: Any, profile: Any) -> FileCost:
    """One file through both pipelines' stages, each timed in CPU seconds."""
    from app.evidence.index.embedding import embed_texts
    from app.evidence.index.sources import Source, clean_document
    from app.evidence.index.staging import chunk_file as _chunk
    from app.ingest.chunking import clean_text, split_sections
    from app.ingest.loaders import load_document
    from benchmarks.quality.natural import dense, dense_rows

    doc, parse_s = _cpu(lambda: load_document(path, path.name))
    placed, v1_chunk_s = _cpu(
        lambda: [
            (p.page, t)
            for p in split_sections(doc.sections, settings.chunk_size, settings.chunk_overlap)
            if (t := clean_text(p.text)).strip()
        ]
    )
    pieces = [t for _, t in placed]
    _, v1_embed_s = await _acpu(lambda: embedder.embed_documents(pieces))
    source = Source(source="original", checksum="bench", filename=path.name, content_type=None)
    (chunked, _meta), evidence_chunk_s = _cpu(
        lambda: _chunk(profile, clean_document(doc), source, frozenset())
    )
    chunks = chunked.chunks
    vectors, evidence_embed_s = await _acpu(
        lambda: embed_texts(embedder, profile, [c.embed_text for c in chunks])
    )
    prose = [c.embed_text for c in chunks if c.place.kind != "table_row"]
    _, prose_embed_s = await _acpu(lambda: embed_texts(embedder, profile, prose))
    links, overlap_s = _cpu(
        lambda: dense.link(
            [("f", page, text) for page, text in placed],
            [("f", c) for c in chunks],
        )
    )
    matrix = np.asarray(vectors, dtype=np.float32)
    kinds = [c.place.kind for c in chunks]
    _, pool_s = _cpu(lambda: dense.pool(matrix, kinds, links))
    # (D1): the prose vectors as embedded above, the V1 chunks holding none embedded on their own
    prose_matrix = np.zeros_like(matrix)
    prose_rows = [i for i, k in enumerate(kinds) if k != "table_row"]
    prose_matrix[prose_rows] = matrix[prose_rows]
    alone = dense_rows.without_prose(kinds, links)
    own = np.zeros((len(pieces), matrix.shape[1]), dtype=np.float32)
    own_embed_s = 0.0
    if alone:
        own_vectors, own_embed_s = await _acpu(lambda: embedder.embed_documents([pieces[i] for i in alone]))
        own[alone] = dense.unit_rows(np.asarray(own_vectors, dtype=np.float32))
    (pooled, _), strict_pool_s = _cpu(lambda: dense_rows.pool_prose(prose_matrix, kinds, links.members, own))
    _, map_s = _cpu(lambda: _row_vectors(kinds, links, pooled))
    counter = profile.counter
    return FileCost(
        name=path.name,
        pages=int(doc.page_count or 0),
        v1_chunks=len(pieces),
        evidence_chunks=len(chunks),
        v1_tokens=sum(counter.count(t) for t in pieces),
        evidence_tokens=sum(counter.count(c.embed_text) for c in chunks),
        parse_s=parse_s,
        v1_chunk_s=v1_chunk_s,
        v1_embed_s=v1_embed_s,
        evidence_chunk_s=evidence_chunk_s,
        evidence_embed_s=evidence_embed_s,
        prose_embed_s=prose_embed_s,
        overlap_s=overlap_s,
        pool_s=pool_s,
        unmapped=links.unmapped_evidence,
        empty_v1=links.empty_v1,
        own_chunks=len(alone),
        own_embed_s=own_embed_s,
        strict_pool_s=strict_pool_s,
        map_s=map_s,
    )


def _row_vectors(kinds: Sequence[str], links: Any, pooled: np.ndarray) -> np.ndarray:
    """(D1): each table row's vector, its V1 chunk's (zero: no V1 chunk holds it)."""
    from benchmarks.quality.natural import dense_rows

    out = np.zeros((len(kinds), pooled.shape[1]), dtype=np.float32)
    for j, i in dense_rows.holders(kinds, links).items():
        out[j] = pooled[i]
    return out


def some_pages(pdf: Path, first: int, last: int, folder: Path) -> Path:
    """Pages `first`..`last` (1-based) of `pdf` as a new PDF in `folder` (pypdf, which the service ships)."""
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(str(pdf))
    writer = PdfWriter()
    for page in reader.pages[first - 1 : last]:
        writer.add_page(page)
    out = folder / f"{pdf.stem}.p{first}-{last}.pdf"
    with out.open("wb") as f:
        writer.write(f)
    return out


def report(costs: Sequence[FileCost]) -> str:
    """Per file and in all: the CPU seconds of each row, per V1 chunk, and its ratio to V1 alone."""
    lines = [
        "file | pages | V1 / evidence chunks | V1 / evidence tokens | "
        "V1 alone | (A) today | (B) V1 vectors | (C) pooled | (D) prose vectors | (D1) rows inherit"
        "   (CPU s; × V1 alone)",
    ]
    for c in [*costs, _total(costs)]:
        rows = c.rows()
        base = rows["V1 alone"]
        cells = " | ".join(f"{v:.1f} s ({v / base:.2f}×)" for v in rows.values())
        lines.append(
            f"{c.name} | {c.pages} | {c.v1_chunks} / {c.evidence_chunks} | "
            f"{c.v1_tokens} / {c.evidence_tokens} | {cells}"
        )
    t = _total(costs)
    lines.append(
        f"stages (all files, CPU s): parse {t.parse_s:.1f}, V1 chunks {t.v1_chunk_s:.1f}, V1 vectors "
        f"{t.v1_embed_s:.1f} ({1000 * t.v1_embed_s / max(t.v1_chunks, 1):.0f} ms a chunk), evidence chunks "
        f"{t.evidence_chunk_s:.1f}, evidence vectors {t.evidence_embed_s:.1f} "
        f"({1000 * t.evidence_embed_s / max(t.evidence_chunks, 1):.0f} ms a chunk; prose only "
        f"{t.prose_embed_s:.1f}), overlap "
        f"{t.overlap_s:.2f}, pooling {t.pool_s:.2f}; evidence chunks in no V1 chunk {t.unmapped}, "
        f"V1 chunks holding none {t.empty_v1}; (D1) V1 chunks holding no prose {t.own_chunks} embedded "
        f"{t.own_embed_s:.2f}, prose pooling {t.strict_pool_s:.2f}, rows' vectors {t.map_s:.2f}"
    )
    return "\n".join(lines)


def _total(costs: Sequence[FileCost]) -> FileCost:
    sums = {k: sum(getattr(c, k) for c in costs) for k in asdict(costs[0]) if k != "name"}
    return FileCost(name="all", **sums)


async def run(paths: Sequence[Path]) -> list[FileCost]:
    """Every file measured with the service's default settings and embedder."""
    from app.clients.embeddings import build_embedder
    from app.config import Settings
    from app.evidence.index.profile import build_profile

    settings = Settings()
    embedder = build_embedder(settings)
    profile = build_profile(settings)
    await embedder.embed_documents(["warm up the model"])
    out = []
    for path in paths:
        out.append(await measure(path, embedder, settings, profile))
        print(f"{path.name}: done", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.dense_cost", description=__doc__)
    p.add_argument("files", nargs="*", type=Path, help="default: Debian Reference chapters 1-3 (en) and PDFs")
    # past the contents pages, which the evidence index keeps out as navigation
    p.add_argument("--pdf-pages", default="61-100", help="the default PDFs' pages, FIRST-LAST (%(default)s)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)
    first, last = (int(x) for x in a.pdf_pages.split("-", 1))
    with tempfile.TemporaryDirectory(prefix="dense-cost-") as tmp:
        paths = list(a.files) or [
            *(DEBIAN_REFERENCE / name for name in DEFAULT_HTML),
            *(some_pages(DEBIAN_REFERENCE / pdf, first, last, Path(tmp)) for pdf in DEFAULT_PDFS),
        ]
        costs = asyncio.run(run(paths))
    print(report(costs))
    if a.json:
        a.json.write_text(json.dumps([asdict(c) for c in costs], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
