"""The man-page set: a seeded sample of sections 1 and 8, rendered with `man -l FILE | col -b`.

The query for a page is its NAME line's description; that description is removed from the text
that gets indexed (the NAME section keeps only the names), so the query is never a verbatim line of
its own page. Rules, applied in the sample's order and never by hand:
- skipped: symlinks and `.so` redirections, pages whose NAME section has no "name - description"
  form, descriptions under 3 words or made by help2man ("manual page for ..."), pages whose text
  (after the removal) equals an earlier page's, and pages whose description equals an earlier
  page's (that query would have two right answers);
- no family (the first word of the page's file name: `gcloud` for `gcloud_compute_ssl-policies_delete`)
  takes more than `family_cap` of the sample: on a machine with the Google Cloud SDK, 16,631 of
  man1's 17,847 pages are gcloud's, and a uniform sample would measure little else;
- the first `pages` accepted pages are indexed, the next `held_out` ones are not: their
  descriptions are unanswerable questions;
- indexed text is cut at `max_chars` (at a line end), to bound embedding time; the cut share is
  reported.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import re
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmarks.quality.dataset import Document, Query
from benchmarks.quality.metrics import normalise

MAN_DIRS = (Path("/usr/share/man/man1"), Path("/usr/share/man/man8"))
_HEADING = re.compile(r"^[A-Z][A-Z0-9 ,()/_-]*$")
# man(1) joins names and description with " - " (groff may render the dash as U+2010, U+2012..U+2014)
_DASH = re.compile(r"\s[-\u2010-\u2014]\s+")
MIN_TEXT_CHARS = 200
MIN_DESCRIPTION_WORDS = 3
DEFAULT_FAMILY_CAP = 0.45
_FAMILY = re.compile(r"[_.\-]")


@dataclass(frozen=True)
class ManPage:
    """A rendered page: the query (description), the names, and the text to index."""

    source: str
    names: str
    description: str
    text: str
    cut: bool


def candidates(dirs: tuple[Path, ...] = MAN_DIRS) -> list[Path]:
    """Regular (non-symlink) page files of the given sections, sorted by path."""
    out: list[Path] = []
    for folder in dirs:
        if not folder.is_dir():
            continue
        out.extend(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    return sorted(out)


def family(path: Path) -> str:
    """The first word of a page's file name (`git-commit.1.gz` -> `git`)."""
    return _FAMILY.split(path.name, maxsplit=1)[0]


def is_redirect(path: Path) -> bool:
    """True for a `.so other/page` stub (its content is another page's)."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return True
    return head.lstrip().startswith(b".so ")


def render(path: Path, timeout_s: float = 60.0) -> str:
    """`man --nh --nj -l FILE | col -b` at 80 columns (no hyphenation or justification: words stay whole)."""
    env = {**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8", "MAN_KEEP_FORMATTING": ""}
    env.pop("MANPAGER", None)
    env.pop("PAGER", None)
    man = subprocess.run(
        ["man", "--nh", "--nj", "-l", str(path)],
        capture_output=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    col = subprocess.run(["col", "-b"], input=man.stdout, capture_output=True, timeout=timeout_s, check=False)
    return col.stdout.decode("utf-8", errors="replace")


def split_name_section(text: str) -> tuple[str, str, str] | None:
    """(names, description, text with the description removed), or None without a usable NAME section.

    The NAME section runs from a line "NAME" to the next unindented heading; its body is
    "name[, name...] - description", possibly wrapped over several lines.
    """
    lines = text.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "NAME" and not line[:1].isspace())
    except StopIteration:
        return None
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1
    body = " ".join(line.strip() for line in lines[start + 1 : end] if line.strip())
    match = _DASH.search(" " + body + " ") if body else None
    if match is None:
        return None
    names = body[: match.start()].strip().rstrip(",")
    description = body[match.end() - 1 :].strip()
    if not names or not description:
        return None
    kept = [*lines[: start + 1], f"       {names}", "", *lines[end:]]
    return names, description, "\n".join(kept)


def cut_text(text: str, max_chars: int) -> tuple[str, bool]:
    """`text` cut at the last line end before `max_chars` (whole when shorter); (text, was cut)."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text, False
    head = text[:max_chars]
    nl = head.rfind("\n")
    return (head[:nl] if nl > max_chars // 2 else head), True


def accept(rendered: str, source: str, max_chars: int) -> ManPage | None:
    """The page if it passes the rules in the module docstring (except the two cross-page ones)."""
    split = split_name_section(rendered)
    if split is None:
        return None
    names, description, text = split
    if len(description.split()) < MIN_DESCRIPTION_WORDS or "manual page for" in description.lower():
        return None
    text = text.strip("\n") + "\n"
    if len(text) < MIN_TEXT_CHARS:
        return None
    text, cut = cut_text(text, max_chars)
    return ManPage(source=source, names=names, description=description, text=text, cut=cut)


def _rendered_cached(path: Path, cache: Path) -> str:
    key = hashlib.sha256(f"{path}\0{path.stat().st_size}\0{path.stat().st_mtime_ns}".encode()).hexdigest()
    target = cache / key[:2] / f"{key}.txt"
    if target.is_file():
        return target.read_text(encoding="utf-8")
    text = render(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    return text


def _rendered_in_order(paths: list[Path], cache: Path, workers: int) -> Iterator[tuple[Path, str]]:
    """Renders in parallel (bounded look-ahead), yields in the given order."""
    block = max(8, workers * 8)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(0, len(paths), block):
            part = paths[i : i + block]
            yield from zip(part, pool.map(lambda p: _rendered_cached(p, cache), part), strict=True)


def sample(
    *,
    pages: int,
    held_out: int,
    seed: int,
    max_chars: int,
    cache: Path,
    workers: int = 2,
    family_cap: float = DEFAULT_FAMILY_CAP,
    dirs: tuple[Path, ...] = MAN_DIRS,
    say: Callable[[str], None] = lambda _m: None,
) -> tuple[list[ManPage], list[ManPage], dict[str, int]]:
    """(indexed pages, held-out pages, counts of what was skipped and why)."""
    paths = candidates(dirs)
    random.Random(seed).shuffle(paths)
    counts = {
        "candidates": len(paths),
        "redirect": 0,
        "family_full": 0,
        "no_name_or_short": 0,
        "duplicate_text": 0,
        "duplicate_description": 0,
        "rendered": 0,
    }
    cap = max(1, int(family_cap * (pages + held_out)))
    per_family: dict[str, int] = {}
    seen_text: set[str] = set()
    seen_desc: set[str] = set()
    indexed: list[ManPage] = []
    left_out: list[ManPage] = []
    todo = paths

    def wanted() -> bool:
        return len(indexed) < pages or len(left_out) < held_out

    # walk the shuffled list in windows so that rendering stops soon after enough pages are accepted
    pos = 0
    while wanted() and pos < len(todo):
        window: list[Path] = []
        while pos < len(todo) and len(window) < 64:
            path = todo[pos]
            pos += 1
            if per_family.get(family(path), 0) >= cap:
                counts["family_full"] += 1
                continue
            if is_redirect(path):
                counts["redirect"] += 1
                continue
            window.append(path)
        for path, rendered in _rendered_in_order(window, cache, workers):
            counts["rendered"] += 1
            if not wanted():
                break
            if per_family.get(family(path), 0) >= cap:
                counts["family_full"] += 1
                continue
            page = accept(rendered, str(path), max_chars)
            if page is None:
                counts["no_name_or_short"] += 1
                continue
            text_key = hashlib.sha256(page.text.encode()).hexdigest()
            desc_key = normalise(page.description)
            if text_key in seen_text:
                counts["duplicate_text"] += 1
                continue
            if desc_key in seen_desc:
                counts["duplicate_description"] += 1
                continue
            seen_text.add(text_key)
            seen_desc.add(desc_key)
            per_family[family(path)] = per_family.get(family(path), 0) + 1
            (indexed if len(indexed) < pages else left_out).append(page)
        say(
            f"man pages: {len(indexed)}/{pages} indexed, {len(left_out)}/{held_out} held out, "
            f"{counts['rendered']} rendered"
        )
    counts["largest_family"] = max(per_family.values(), default=0)
    counts["families"] = len(per_family)
    return indexed, left_out, counts


def file_id_for(source: str) -> str:
    """`/usr/share/man/man1/ls.1.gz` -> `man-ls.1`."""
    name = Path(source).name
    return "man-" + (name[:-3] if name.endswith(".gz") else name)


def build(
    indexed: list[ManPage],
    held_out: list[ManPage],
    *,
    kb_size: int,
    folder: Path,
    seed: int,
) -> tuple[list[Document], list[Query]]:
    """Documents (text files written under `folder`) split into KBs of at most `kb_size`, the
    description queries, and the held-out descriptions as unanswerable queries."""
    folder.mkdir(parents=True, exist_ok=True)
    docs: list[Document] = []
    queries: list[Query] = []
    kb_names = []
    for i, page in enumerate(indexed):
        kb = f"agent_quality_man_{i // kb_size + 1}"
        if kb not in kb_names:
            kb_names.append(kb)
        fid = file_id_for(page.source)
        target = folder / f"{fid}.txt"
        data = page.text.encode("utf-8")
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        docs.append(Document(fid, f"{fid[4:]}.txt", str(target), "text/plain", kb, page.source))
        queries.append(
            Query(
                qid=f"man:{fid}",
                set="man",
                kind="description",
                text=page.description,
                kb=kb,
                relevant=(fid,),
                answer=None,
                answerable=True,
                note=page.names,
            )
        )
    rng = random.Random(seed + 1)
    for page in held_out:
        fid = file_id_for(page.source)
        queries.append(
            Query(
                qid=f"unans:held-out:{fid}",
                set="unanswerable",
                kind="held-out-description",
                text=page.description,
                kb=rng.choice(kb_names) if kb_names else "agent_quality_man_1",
                relevant=(),
                answer=None,
                answerable=False,
                note=page.names,
            )
        )
    return docs, queries
