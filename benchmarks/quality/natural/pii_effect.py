"""What embedding redacted text (PII_REDACT=embeddings) costs evidence search, on the natural questions.

    .venv/bin/python -m benchmarks.quality.natural.pii_effect [--split dev] [--capture FILE]

A remote provider would embed redacted text; the natural corpora hold real personal data (the man
pages' and the Debian Reference's authors' addresses, mailing lists, example hosts). From a replay
capture (`replay capture`, every evidence chunk and vector of each knowledge base and each question's
vector), every evidence chunk whose text the redactor changes, and every question it changes, is
embedded twice with the offline model, as written and redacted; everything else keeps its captured
vector. Both arms then rank every question through the service's own fusion, rerank and refusal
(`replay`), the vector channel over all evidence vectors (`evidence-all`), and print the same
table: the difference is the redaction's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.quality.natural import dense_rows, replay


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)


async def arms(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[Any], list[Any], str]:
    """Both arms' knowledge bases and cases: (plain kbs, redacted kbs, plain cases, redacted cases, facts)."""
    from app.clients.embeddings.local import LocalEmbedder
    from app.text.pii import Redactor

    redactor = Redactor()
    embedder = LocalEmbedder(model="all-MiniLM-L6-v2")
    plain_kbs: dict[str, Any] = {}
    redacted_kbs: dict[str, Any] = {}
    changed_chunks = total_chunks = 0
    for kb, data in doc["kbs"].items():
        changed = [(i, d.content, redactor.redact(d.content)) for i, d in enumerate(data.details)]
        changed = [(i, text, red) for i, text, red in changed if red != text]
        total_chunks += len(data.details)
        changed_chunks += len(changed)
        plain, red = data.vectors.copy(), data.vectors.copy()
        if changed:
            rows = [i for i, _, _ in changed]
            plain[rows] = _unit(await embedder.embed_documents([t for _, t, _ in changed]))
            red[rows] = _unit(await embedder.embed_documents([r for _, _, r in changed]))
        plain_kbs[kb] = dataclasses.replace(data, vectors=plain)
        redacted_kbs[kb] = dataclasses.replace(data, vectors=red)
    plain_cases, redacted_cases = [], []
    changed_questions = 0
    for case in doc["cases"]:
        text = redactor.redact(case.text)
        if text == case.text:
            plain_cases.append(case)
            redacted_cases.append(case)
            continue
        changed_questions += 1
        plain_cases.append(dataclasses.replace(case, query_vector=(await embedder.embed_query(case.text))[0]))
        redacted_cases.append(dataclasses.replace(case, query_vector=(await embedder.embed_query(text))[0]))
    facts = (
        f"evidence chunks the redactor changes: {changed_chunks} of {total_chunks}; "
        f"questions it changes: {changed_questions} of {len(doc['cases'])}"
    )
    return plain_kbs, redacted_kbs, plain_cases, redacted_cases, facts


def _score(kbs: dict[str, Any], cases: list[Any], v1: dict[str, Any], split: str, limit: int) -> str:
    tuning = replay.settings_with([])
    prepared = {kb: dense_rows.prepare(data, source="evidence-all") for kb, data in kbs.items()}
    cases = replay.with_dense(cases, prepared, source="evidence-all", hits=20, limit=limit)
    ranked = asyncio.run(replay._rank_all(cases, tuning))
    scored = replay.score_cases(ranked)
    return replay.table(cases, [replay._as_row(s) for s in scored], v1, split)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality.natural.pii_effect", description=__doc__)
    p.add_argument(
        "--capture", type=Path, default=replay.DATA_ROOT / "bench-results" / "replay" / "capture-others60.pkl"
    )
    p.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    a = p.parse_args(argv)
    doc = replay.load_document(a.capture)
    if not doc.get("kbs"):
        raise SystemExit("this capture has no knowledge base data: capture again")
    plain_kbs, redacted_kbs, plain_cases, redacted_cases, facts = asyncio.run(arms(doc))
    v1 = replay._v1_rows(doc["fingerprint"], doc["cases"])
    limit = replay.settings_with([]).channels.limit
    print(facts)
    print("\nwritten as uploaded:")
    print(_score(plain_kbs, plain_cases, v1, a.split, limit))
    print("\nredacted before embedding (PII_REDACT=embeddings):")
    print(_score(redacted_kbs, redacted_cases, v1, a.split, limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
