"""`scripts/bench scan-retrieval`: what scanning a page costs retrieval, V1 and V2, English and German.

    scripts/bench scan-retrieval                    # 10 pages of each Debian Reference PDF
    scripts/bench scan-retrieval --pages 20 --json out.json

The same pages twice: once as a PDF with its text layer, once as an image-only PDF of the same pages
rendered as a scanner or a phone hands them over (`scripts/bench ocr`'s variants in turn: 150, 200 and
300 dpi, turned by 90 degrees, tilted by 2.5 degrees, photographed). The pages are those
`scripts/bench ocr` picks (at least 800 characters of text, spread over the file) from the Debian
Reference in English and German (`debian-reference-en`, `-de`). Both versions are uploaded through
`POST /embed` to a service on its embedded defaults (OCR on), into two Agents' knowledge bases, one
per version, and every page is asked for by V1 (`/query_multiple`) and V2 (`/query_v2`) in both.

The questions are keyword queries made from each page's text layer: four words of six letters or
more that no other chosen page of its language holds, in the order they occur. They share their
words with the page by construction, so the absolute figures say little about questions people ask
(the natural benchmark measures those); the difference between the two versions of the same page
under the same question is what OCR's misreadings cost. Scored by page (V1's 0-based
`metadata.page`, V2's `metadata.physical_page`): the right page first, and among the first five.
Also printed: seconds per page of each upload (OCR's cost) and the pages `/embed` reports as read by
OCR. Nothing asserts a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pypdfium2

from benchmarks.ocr import VARIANTS, Page, pick_pages, variant
from benchmarks.quality import service as svc
from benchmarks.quality.v2index import wait_for_index

DEFAULT_FILES = (
    Path("/usr/share/debian-reference/debian-reference.en.pdf"),
    Path("/usr/share/debian-reference/debian-reference.de.pdf"),
)
VERSIONS = ("text", "scan")
KB = {"text": "agent_scanbench_text", "scan": "agent_scanbench_scan"}
_WORD = re.compile(r"[^\W\d_]{6,}")


@dataclass(frozen=True)
class Asked:
    """One page's question: which file and page answer it, in each version."""

    language: str
    position: int  # the page's place in the uploaded PDFs (0-based)
    query: str
    file_ids: dict[str, str]  # version -> file id


def keyword_query(text: str, others: Counter[str], words: int = 4) -> str:
    """`words` words of the page (6+ letters) that no other chosen page holds, in reading order."""
    seen: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if word not in seen and others[word] == 0:
            seen.append(word)
    if len(seen) <= words:
        return " ".join(seen)
    step = len(seen) / words
    return " ".join(seen[int(i * step)] for i in range(words))


def text_pdf(source: Path, numbers: Sequence[int], out: Path) -> Path:
    """The chosen pages of `source`, text layer and all, as a new PDF."""
    src = pypdfium2.PdfDocument(source)
    new = pypdfium2.PdfDocument.new()
    try:
        new.import_pages(src, list(numbers))
        new.save(out)
    finally:
        new.close()
        src.close()
    return out


def scan_pdf(source: Path, numbers: Sequence[int], out: Path, folder: Path) -> tuple[Path, list[str]]:
    """The chosen pages as pictures only (the variants in turn), one picture per page; and the variants."""
    merged = pypdfium2.PdfDocument.new()
    names: list[str] = []
    try:
        for i, number in enumerate(numbers):
            name = VARIANTS[i % len(VARIANTS)]
            image, dpi = variant(source, number, name)
            single = folder / f"page-{i}.pdf"
            image.convert("L").save(single, "PDF", resolution=float(dpi))
            page_pdf = pypdfium2.PdfDocument(single)
            try:
                merged.import_pages(page_pdf)
            finally:
                page_pdf.close()
            names.append(name)
        merged.save(out)
    finally:
        merged.close()
    return out, names


def questions(pages_by_language: dict[str, list[Page]], file_ids: dict[tuple[str, str], str]) -> list[Asked]:
    """One keyword question per page (see the module docstring)."""
    asked: list[Asked] = []
    for language, pages in pages_by_language.items():
        words = [set(w.lower() for w in _WORD.findall(p.text)) for p in pages]
        for position, page in enumerate(pages):
            others: Counter[str] = Counter()
            for j, found in enumerate(words):
                if j != position:
                    others.update(found)
            query = keyword_query(page.text, others)
            if query:
                ids = {version: file_ids[(version, language)] for version in VERSIONS}
                asked.append(Asked(language, position, query, ids))
    return asked


def _v1_pages(body: Any) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for pair in body:
        metadata = pair[0].get("metadata", {})
        out.append((str(metadata.get("file_id")), metadata.get("page")))
    return out


def _v2_pages(body: Any) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for item in body.get("results", []):
        physical = item.get("metadata", {}).get("physical_page", item.get("page"))
        out.append((str(item.get("file_id")), physical - 1 if isinstance(physical, int) else None))
    return out


async def ask(
    client: httpx.AsyncClient, asked: Asked, version: str, route: str, files: list[str]
) -> tuple[bool, bool]:
    """Right page first, right page in the first five, asking over every file of the version."""
    body: dict[str, Any] = {"query": asked.query, "file_ids": files, "entity_id": KB[version], "k": 5}
    if route == "V2":
        body["debug"] = True  # the benchmark asks as an admin: a refusal says why
    reply = await client.post("/query_multiple" if route == "V1" else "/query_v2", json=body)
    if reply.status_code != 200:
        raise RuntimeError(f"{route} answered {reply.status_code}: {reply.text[:300]}")
    found = _v1_pages(reply.json()) if route == "V1" else _v2_pages(reply.json())
    gold = (asked.file_ids[version], asked.position)
    refusal = reply.json().get("debug", {}).get("refusal") if route == "V2" else None
    TRACE.append(
        {
            "query": asked.query,
            "version": version,
            "route": route,
            "gold": gold,
            "found": found[:5],
            "refusal": refusal,
        }
    )
    return (bool(found) and found[0] == gold), gold in found[:5]


TRACE: list[dict[str, Any]] = []


async def measure(files: Sequence[Path], pages: int, root: Path) -> dict[str, Any]:
    """Build both versions, upload them, ask every page's question; the figures."""
    chosen: dict[str, list[Page]] = {}
    sources: dict[str, Path] = {}
    for path in files:
        picked, _sizes = pick_pages(path, pages)
        language = picked[0].language if picked else path.stem
        chosen[language], sources[language] = picked, path
    built: dict[tuple[str, str], Path] = {}
    variants: dict[str, list[str]] = {}
    for language, picked in chosen.items():
        numbers = [p.number for p in picked]
        built[("text", language)] = text_pdf(sources[language], numbers, root / f"text-{language}.pdf")
        folder = root / f"pages-{language}"
        folder.mkdir()
        built[("scan", language)], variants[language] = scan_pdf(
            sources[language], numbers, root / f"scan-{language}.pdf", folder
        )
    file_ids = {key: f"scanbench-{key[0]}-{key[1]}" for key in built}
    by_version = {v: sorted(fid for (w, _l), fid in file_ids.items() if w == v) for v in VERSIONS}
    served = await svc.start(root / "service", {"RAG_V2_NAMESPACE_IDS": ",".join(KB.values())})
    figures: dict[str, Any] = {"pages": {lang: len(p) for lang, p in chosen.items()}, "variants": variants}
    try:
        async with httpx.AsyncClient(
            base_url=served.base_url, headers=svc.auth_headers(served.token), timeout=900.0
        ) as client:
            uploads: dict[str, Any] = {}
            for (version, language), path in built.items():
                started = time.perf_counter()
                reply = await client.post(
                    "/embed",
                    data={"file_id": file_ids[(version, language)], "entity_id": KB[version]},
                    files={"file": (path.name, path.read_bytes(), "application/pdf")},
                )
                seconds = time.perf_counter() - started
                if reply.status_code != 200:
                    raise RuntimeError(f"/embed {path.name} answered {reply.status_code}: {reply.text[:300]}")
                uploads[f"{version} {language}"] = {
                    "seconds_per_page": round(seconds / len(chosen[language]), 2),
                    "ocr_pages": len(reply.json().get("ocr_pages") or []),
                    "empty_pages": reply.json().get("empty_pages") or [],
                }
            figures["uploads"] = uploads
            kbs = {KB[v]: by_version[v] for v in VERSIONS}
            figures["v2_index_s"] = (await wait_for_index(client, kbs, timeout_s=1800))["seconds"]
            asked = questions(chosen, file_ids)
            scores: dict[str, dict[str, list[bool]]] = {}
            for a in asked:
                for version in VERSIONS:
                    for route in ("V1", "V2"):
                        first, top5 = await ask(client, a, version, route, by_version[version])
                        row = scores.setdefault(f"{route} {version} {a.language}", {"first": [], "top5": []})
                        row["first"].append(first)
                        row["top5"].append(top5)
            figures["questions"] = len(asked)
            figures["retrieval"] = {
                key: {k: round(statistics.fmean(v), 3) for k, v in row.items()} for key, row in scores.items()
            }
    finally:
        svc.stop(served)
    return figures


def report(figures: dict[str, Any]) -> str:
    """The markdown tables."""
    lines = [
        f"{figures['questions']} keyword questions, one per page ({figures['pages']})",
        "",
        "| route | language | text layer: first / top 5 | scan: first / top 5 |",
        "| --- | --- | --- | --- |",
    ]
    retrieval = figures["retrieval"]
    for route in ("V1", "V2"):
        for language in figures["pages"]:
            text = retrieval.get(f"{route} text {language}", {})
            scan = retrieval.get(f"{route} scan {language}", {})
            lines.append(
                f"| {route} | {language} | {text.get('first', 0):.3f} / {text.get('top5', 0):.3f} | "
                f"{scan.get('first', 0):.3f} / {scan.get('top5', 0):.3f} |"
            )
    lines += ["", "| upload | s/page | pages read by OCR | empty pages |", "| --- | --- | --- | --- |"]
    for name, row in figures["uploads"].items():
        lines.append(f"| {name} | {row['seconds_per_page']} | {row['ocr_pages']} | {row['empty_pages']} |")
    lines.append(f"\nV2 index ready after {figures['v2_index_s']} s")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Command line."""
    p = argparse.ArgumentParser(prog="scripts/bench scan-retrieval", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", type=Path, help="PDFs (default: the Debian Reference, en and de)")
    p.add_argument("--pages", type=int, default=10, help="pages per PDF (%(default)s)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args(argv)
    files = [f for f in (a.files or DEFAULT_FILES) if f.exists()]
    if not files:
        print("no PDF found: apt-get install debian-reference-en debian-reference-de (or name PDFs)")
        return 2
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-scanbench-"))
    try:
        figures = asyncio.run(measure(files, a.pages, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(report(figures))
    if a.json:
        a.json.write_text(json.dumps({**figures, "answers": TRACE}, indent=2))
    return 0
