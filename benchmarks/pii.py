"""`scripts/bench pii`: the PII detectors' precision and recall, and what redaction costs.

    scripts/bench pii                      # the hand-written set, then CPU on the natural corpora's texts
    scripts/bench pii --texts 200          # CPU over this many texts (of bench-results/natural-texts)

Precision and recall per kind on `benchmarks/pii/cases.txt` (English and German sentences with
synthetic personal data marked `[[KIND:text]]`, and sentences with none: product data, versions,
dates, part numbers, the usual look-alikes of a manual). A find counts when its kind is the mark's
and its span overlaps the mark's; every other find is a false positive, every unmatched mark a miss.
Then the CPU of `Redactor.redact` per chunk: the natural benchmark's rendered texts
(`bench-results/natural-texts`, written by `scripts/bench quality --natural`; real manual text)
cut into V1's 1,500-character chunks, timed in this process (`time.process_time`), beside what the
offline embedding model costs per chunk in the same run (a small sample), so the overhead is a
ratio of the same run. Nothing is asserted; the exit code is 1 only when the set cannot be read.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

CASES = Path(__file__).parent / "pii" / "cases.txt"
TEXTS = Path("bench-results") / "natural-texts"
_MARK = re.compile(r"\[\[([A-Z0-9]+):(.+?)\]\]")
CHUNK_CHARS = 1500


@dataclass(frozen=True)
class Case:
    """One sentence of the set: its language, its plain text and its marked spans (kind, start, end)."""

    lang: str
    text: str
    marks: tuple[tuple[str, int, int], ...]


def parse_case(line: str) -> Case:
    """A line `lang|text with [[KIND:value]] marks` as its plain text and the marks' spans."""
    lang, _, marked = line.partition("|")
    out: list[str] = []
    marks: list[tuple[str, int, int]] = []
    at = 0
    length = 0
    for m in _MARK.finditer(marked):
        out.append(marked[at : m.start()])
        length += m.start() - at
        marks.append((m.group(1), length, length + len(m.group(2))))
        out.append(m.group(2))
        length += len(m.group(2))
        at = m.end()
    out.append(marked[at:])
    return Case(lang.strip(), "".join(out), tuple(marks))


def load_cases(path: Path = CASES) -> list[Case]:
    """Every case of the set (comment lines left out)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [parse_case(line) for line in lines if line.strip() and not line.startswith("#")]


def score(cases: list[Case]) -> dict[str, Counter[str]]:
    """Per kind (and `all`, and per language): true positives, false positives, misses."""
    from app.text.pii import Redactor

    redactor = Redactor()
    tally: dict[str, Counter[str]] = {}
    for case in cases:
        finds = [(s.kind, s.start, s.end) for s in redactor.spans(case.text)]
        matched: set[int] = set()
        for kind, start, end in finds:
            hit = next(
                (
                    i
                    for i, (k, s, e) in enumerate(case.marks)
                    if k == kind and start < e and s < end and i not in matched
                ),
                None,
            )
            outcome = "tp" if hit is not None else "fp"
            if hit is not None:
                matched.add(hit)
            for key in (kind, "all", f"all {case.lang}"):
                tally.setdefault(key, Counter())[outcome] += 1
        for i, (kind, _, _) in enumerate(case.marks):
            if i not in matched:
                for key in (kind, "all", f"all {case.lang}"):
                    tally.setdefault(key, Counter())["fn"] += 1
    return tally


def table(tally: dict[str, Counter[str]]) -> list[str]:
    """Precision and recall per kind as markdown rows."""
    rows = [
        "| kind | marks | found right | false finds | precision | recall |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in sorted(tally, key=lambda k: (k.startswith("all"), k)):
        c = tally[kind]
        tp, fp, fn = c["tp"], c["fp"], c["fn"]
        precision = f"{tp / (tp + fp):.2f}" if tp + fp else "-"
        recall = f"{tp / (tp + fn):.2f}" if tp + fn else "-"
        rows.append(f"| {kind} | {tp + fn} | {tp} | {fp} | {precision} | {recall} |")
    return rows


def chunks_of(folder: Path, limit: int) -> list[str]:
    """Up to `limit` texts of `folder` (sorted, so every run reads the same) cut into V1-sized chunks."""
    files = sorted(folder.rglob("*.txt"))[:limit]
    out: list[str] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        out.extend(text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS))
    return out


def cpu_per_chunk(chunks: list[str]) -> tuple[float, int]:
    """CPU milliseconds per chunk of redacting every chunk, and how many finds there were."""
    from app.text.pii import Redactor

    redactor = Redactor()
    started = time.process_time()
    finds = sum(len(redactor.spans(chunk)) for chunk in chunks)
    elapsed = time.process_time() - started
    return 1000 * elapsed / max(len(chunks), 1), finds


def embed_cpu_per_chunk(chunks: list[str]) -> float:
    """CPU milliseconds per chunk of the offline default model embedding a sample of `chunks`."""
    import asyncio

    from app.clients.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder(model="all-MiniLM-L6-v2", threads=1)
    asyncio.run(embedder.embed_documents(chunks[:4]))  # loads the model outside the timing
    sample = chunks[4:68]
    started = time.process_time()
    asyncio.run(embedder.embed_documents(sample))
    return 1000 * (time.process_time() - started) / max(len(sample), 1)


def main(argv: list[str]) -> int:
    """Parse, measure, print."""
    p = argparse.ArgumentParser(prog="scripts/bench pii", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=Path, default=CASES, help="the hand-written set (%(default)s)")
    p.add_argument("--texts", type=int, default=300, help="texts of --text-dir timed (%(default)s)")
    p.add_argument("--text-dir", type=Path, default=TEXTS, help="real text to time on (%(default)s)")
    p.add_argument("--no-embed", action="store_true", help="skip the embedding model's CPU beside it")
    a = p.parse_args(argv)
    cases = load_cases(a.cases)
    marks = sum(len(c.marks) for c in cases)
    print(f"PII detectors on {a.cases} ({len(cases)} sentences, {marks} marked, synthetic data)\n")
    print("\n".join(table(score(cases))))
    chunks = chunks_of(a.text_dir, a.texts) if a.text_dir.is_dir() else []
    if not chunks:
        print(f"\nno texts in {a.text_dir} (run `scripts/bench quality --natural` once): CPU not measured")
        return 0
    per_chunk, finds = cpu_per_chunk(chunks)
    print(
        f"\nRedaction CPU: {per_chunk:.2f} ms a chunk of {CHUNK_CHARS} characters over {len(chunks)} chunks "
        f"of {a.texts} natural-benchmark texts ({finds} finds)"
    )
    if not a.no_embed:
        embed = embed_cpu_per_chunk(chunks)
        print(
            f"The offline model's embedding, same run: {embed:.1f} ms a chunk; redaction adds "
            f"{100 * per_chunk / embed:.1f} % to it (a remote provider's call costs this process less, "
            "its latency more)"
        )
    return 0
