"""What the breadcrumb in front of every evidence chunk costs and buys (docs/performance.md).

    python -m benchmarks.quality.natural.crumbs [CAPTURE] [--out FOLDER]
    python -m benchmarks.quality.natural.replay score --capture FOLDER/capture-last.pkl \\
        --vector-source evidence-all --split dev

Every evidence prose chunk of a replay capture (`replay.py capture`) is embedded again with the
service's offline model under cheaper texts than the shipped "Title › Section › Subsection" +
content, and a copy of the capture is written per variant with those vectors in place of the stored
ones (table rows keep theirs); `replay score --vector-source evidence-all` then recomputes the vector
channel over them by an exact scan, everything else as served. The chunk boundaries stay as they
are. The shipped text is rebuilt too, and its cosine to the stored vectors printed (1.0: the
rebuild is exact). Prints the tokens each variant embeds.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.evidence.index.chunk_writer import breadcrumb

VARIANTS = ("full", "notitle", "last", "content")
SEPARATE = "sep"  # content, plus each distinct breadcrumb embedded once and added
SEPARATE_WEIGHT = 0.5


def texts_of(title: str, section: Sequence[str], content: str) -> dict[str, str]:
    """The embedded text of one chunk under each variant (the shipped one is "full")."""
    full = breadcrumb(title, tuple(section))
    return {
        "full": f"{full}\n{content}" if full else content,
        "notitle": f"{breadcrumb('', tuple(section))}\n{content}" if section else content,
        "last": f"{section[-1]}\n{content}" if section else content,
        "content": content,
    }


def add_crumbs(content: np.ndarray, crumbs: Sequence[str], vectors: dict[str, np.ndarray]) -> np.ndarray:
    """Unit rows of each content vector plus SEPARATE_WEIGHT times its breadcrumb's vector."""
    out = content.astype(np.float32).copy()
    for row, crumb in enumerate(crumbs):
        if crumb in vectors:
            out[row] += SEPARATE_WEIGHT * vectors[crumb]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    out /= np.where(norms > 0, norms, 1.0)
    return out


async def _embed(embedder: Any, texts: list[str]) -> np.ndarray:
    return np.asarray(await embedder.embed_documents(texts), dtype=np.float32)


async def run(capture: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """One capture copy per variant, and the tokens each variant embeds."""
    from app.clients.embeddings.local import LocalEmbedder, local_model_counter

    counter, _ = local_model_counter()
    embedder = LocalEmbedder()
    copies = {v: {**capture, "kbs": {}} for v in (*VARIANTS, SEPARATE)}
    tokens = dict.fromkeys((*VARIANTS, SEPARATE), 0)
    for name, kb in capture["kbs"].items():
        prose = [i for i, d in enumerate(kb.details) if d.place.kind != "table_row"]
        per = [
            texts_of(kb.details[i].title, kb.details[i].place.section, kb.details[i].content) for i in prose
        ]
        crumbs = [breadcrumb(kb.details[i].title, tuple(kb.details[i].place.section)) for i in prose]
        vectors = {v: await _embed(embedder, [t[v] for t in per]) for v in VARIANTS}
        distinct = sorted({c for c in crumbs if c})
        crumb_vectors = dict(zip(distinct, await _embed(embedder, distinct), strict=True)) if distinct else {}
        for v in VARIANTS:
            tokens[v] += sum(counter.count(t[v]) for t in per)
        # the separate variant embeds the content texts and each distinct breadcrumb once
        tokens[SEPARATE] += sum(counter.count(t["content"]) for t in per) + sum(
            counter.count(c) for c in distinct
        )
        cosine = (vectors["full"] * kb.vectors[prose]).sum(axis=1)
        print(f"{name}: {len(prose)} prose chunks; rebuilt shipped text against stored vectors: cosine "
              f"min {cosine.min():.3f}", file=sys.stderr)  # fmt: skip
        made = {**vectors, SEPARATE: add_crumbs(vectors["content"], crumbs, crumb_vectors)}
        for v, matrix in made.items():
            kb_copy = copy.copy(kb)
            kb_copy.vectors = kb.vectors.copy()
            kb_copy.vectors[prose] = matrix
            copies[v]["kbs"][name] = kb_copy
    await embedder.aclose()
    return copies, tokens


def write(copies: dict[str, dict[str, Any]], out: Path) -> None:
    """Each copy as `out`/capture-<variant>.pkl."""
    out.mkdir(parents=True, exist_ok=True)
    for v, data in copies.items():
        with (out / f"capture-{v}.pkl").open("wb") as f:
            pickle.dump(data, f)


def main(argv: Sequence[str] | None = None) -> int:
    """Make the variant captures and print their tokens."""
    from benchmarks.quality.natural import replay

    p = argparse.ArgumentParser(prog="python -m benchmarks.quality.natural.crumbs", description=__doc__)
    default = replay.default_capture()
    p.add_argument("capture", nargs="?", type=Path, default=default, help="a replay capture (%(default)s)")
    p.add_argument("--out", type=Path, default=Path("bench-results/crumbs"), help="folder for the copies")
    a = p.parse_args(argv)
    capture = replay.load_document(a.capture)
    copies, tokens = asyncio.run(run(capture))
    write(copies, a.out)
    base = tokens["full"]
    for v, n in tokens.items():
        print(f"{v}: {n:,} tokens ({n / base - 1:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
