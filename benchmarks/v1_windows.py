"""`python -m benchmarks.v1_windows`: how much of V1 chunk text reaches the local model; what windows cost.

V1 keeps rag_api's chunking (`CHUNK_SIZE` 1,500 characters, overlap 100), while the local model
(all-MiniLM-L6-v2) reads at most 256 word pieces per run. This renders real man pages
(`man -l FILE | col -b`, the machine's own, picked evenly from sections 1, 5 and 8), chunks them
exactly as an upload does, and reports:

- the share of chunk text (characters) and of word pieces that reached the model before windows
  (the first 254 word pieces of each chunk, plus [CLS] and [SEP]) and after (all of it);
- how many chunks pass the window, and the windows per chunk;
- the time to embed the same chunks both ways in one thread (the runtime an ingest uses), so the
  ingest cost of windows is measured, not guessed: `--rounds` alternating rounds, the fastest of
  each kept (the machine may be shared).

A measurement, not a test: nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import time
from pathlib import Path

from app.clients.embeddings.local import MAX_TOKENS, local_model_counter, shared_runtime
from app.ingest.chunking import split_sections
from app.ingest.types import Section
from app.text.tokens import fits, window_texts

MAN_ROOT = Path("/usr/share/man")


def man_pages(count: int) -> list[Path]:
    """`count` man pages spread evenly over sections 1, 5 and 8 (sorted, so runs repeat)."""
    found: list[Path] = []
    per_section = max(1, count // 3)
    for section in ("man1", "man5", "man8"):
        pages = sorted((MAN_ROOT / section).glob("*.gz"))
        step = max(1, len(pages) // per_section)
        found.extend(pages[::step][:per_section])
    return found[:count]


def render(page: Path) -> str:
    """The page as `man -l FILE | col -b` prints it (80 columns, no pager)."""
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0", "MANPAGER": "cat", "PAGER": "cat"}
    with gzip.open(page, "rb") as handle:
        if handle.read(2) == b".s":  # `.so` redirect pages hold no text of their own
            return ""
    shown = subprocess.run(
        ["man", "-l", str(page)], capture_output=True, env=env, timeout=60, check=False
    ).stdout
    plain = subprocess.run(["col", "-b"], input=shown, capture_output=True, timeout=60, check=False).stdout
    return plain.decode("utf-8", "replace")


def main() -> None:
    """Render, chunk, count and time; print a markdown summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, default=90, help="man pages to render (default 90)")
    parser.add_argument("--timed", type=int, default=200, help="chunks to embed both ways (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (default 3)")
    args = parser.parse_args()

    counter, window = local_model_counter()
    budget = window - counter.special_tokens
    chunks: list[str] = []
    pages = 0
    for page in man_pages(args.pages):
        text = render(page)
        if not text.strip():
            continue
        pages += 1
        chunks.extend(c.text for c in split_sections([Section(text)], 1500, 100))

    chars = reached_chars = tokens = reached_tokens = long_chunks = windows = 0
    for chunk in chunks:
        spans = counter.spans(chunk)
        chars += len(chunk)
        tokens += len(spans)
        if fits(chunk, counter, window):
            reached_chars += len(chunk)
            reached_tokens += len(spans)
            windows += 1
            continue
        long_chunks += 1
        # before windows the model saw the text up to the end of its 254th word piece
        reached_chars += spans[budget - 1][1]
        reached_tokens += budget
        windows += len(window_texts(chunk, counter, window))

    runtime = shared_runtime()
    runtime.load()
    # every k-th chunk, so the timed set has the corpus's share of long chunks
    step = max(1, len(chunks) // max(1, args.timed))
    timed = chunks[::step][: args.timed]
    runtime.embed_truncated(timed[:8])  # warm up
    before_s = after_s = float("inf")
    for _ in range(max(1, args.rounds)):
        started = time.perf_counter()
        runtime.embed_truncated(timed)
        before_s = min(before_s, time.perf_counter() - started)
        started = time.perf_counter()
        runtime.embed(timed)
        after_s = min(after_s, time.perf_counter() - started)
    timed_long = sum(1 for c in timed if not fits(c, counter, window))

    print(f"## V1 chunks and the local model's {MAX_TOKENS}-token window\n")
    print(
        f"Corpus: {pages} man pages (`man -l FILE | col -b`), {len(chunks)} chunks of at most 1,500 chars.\n"
    )
    print("| measure | before (cut at 256 tokens) | after (pooled windows) |")
    print("| --- | --- | --- |")
    print(f"| chunk text reaching the model (chars) | {reached_chars / chars:.1%} | 100.0% |")
    print(f"| word pieces reaching the model | {reached_tokens / tokens:.1%} | 100.0% |")
    share = long_chunks / len(chunks)
    print(f"| chunks past the window | {long_chunks} of {len(chunks)} ({share:.1%}) | same |")
    print(f"| model runs per chunk | 1.00 | {windows / len(chunks):.2f} |")
    print(
        f"| embedding time, {len(timed)} chunks ({timed_long} past the window), one thread, "
        f"fastest of {max(1, args.rounds)} "
        f"| {before_s:.2f} s ({before_s / len(timed) * 1000:.1f} ms/chunk) "
        f"| {after_s:.2f} s ({after_s / len(timed) * 1000:.1f} ms/chunk, {after_s / before_s:.2f}×) |"
    )


if __name__ == "__main__":
    main()
