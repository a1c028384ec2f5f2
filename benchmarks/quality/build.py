"""The quality run's sets, built from this machine's documentation: a seeded sample of man pages and
of Python's HTML reference with their queries, and mutated identifiers verified absent."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.progress import Progress
from benchmarks.quality import htmldocs, manpages
from benchmarks.quality.dataset import Chunk, Corpus, Query
from benchmarks.quality.unanswerable import AbsenceChecker, long_options, mutants

if TYPE_CHECKING:  # run.py imports this module: its options are only a type here
    from benchmarks.quality.run import Options


def ensure_python_doc(setup: bool, progress: Progress, root: Path = htmldocs.DOC_ROOT) -> None:
    """The HTML set's source: present, installed now (`--setup`, as root), or a clear error."""
    if root.is_dir():
        return
    if root != htmldocs.DOC_ROOT:
        raise SetupError(f"--html-root {root} is not a folder")
    if not setup:
        raise SetupError(htmldocs.INSTALL_HINT + " (or pass --setup to let the benchmark install it)")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SetupError("--setup installs python3-doc with apt-get and needs root; " + htmldocs.INSTALL_HINT)
    progress.say("installing python3-doc (apt-get update && apt-get install -y python3-doc) ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "python3-doc"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SetupError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-500:]}")
    if not htmldocs.DOC_ROOT.is_dir():
        raise SetupError(f"python3-doc installed but {htmldocs.DOC_ROOT} is missing")


class SetupError(RuntimeError):
    """The benchmark cannot run as asked; the message says what to do."""


def build_corpus(opts: Options, progress: Progress) -> tuple[Corpus, list[htmldocs.Definition]]:
    """The documents and the answerable and held-out queries of the chosen sets (cached renders)."""
    s = opts.sizes
    corpus = Corpus()
    defs: list[htmldocs.Definition] = []
    cache = opts.data_dir / "cache"
    if "man" in opts.sets:
        with progress.phase("man pages: sample and render"):
            indexed, held, counts = manpages.sample(
                pages=s.pages,
                held_out=s.held_out,
                seed=opts.seed,
                max_chars=s.max_chars,
                cache=cache / "man-rendered",
                workers=opts.render_workers,
                say=progress.say,
            )
        if len(indexed) < s.pages:
            raise SetupError(f"only {len(indexed)} usable man pages in sections 1 and 8 (asked {s.pages})")
        docs, queries = manpages.build(
            indexed, held, kb_size=opts.kb_size, folder=cache / f"man-text-{s.max_chars}", seed=opts.seed
        )
        corpus.documents += docs
        corpus.queries += queries
        counts["cut_at_max_chars"] = sum(p.cut for p in indexed)
        counts["indexed"] = len(indexed)
        counts["held_out"] = len(held)
        counts["indexed_chars"] = sum(len(p.text) for p in indexed)
        corpus.facts["man"] = counts
    if "html" in opts.sets:
        ensure_python_doc(opts.setup, progress, opts.html_root)
        with progress.phase("HTML pages: sample and parse"):
            docs, queries, defs, counts = htmldocs.build(
                pages=s.html_pages,
                table_queries=s.table_queries,
                identifier_queries=s.identifier_queries,
                per_table=s.per_table,
                seed=opts.seed,
                root=opts.html_root,
            )
        corpus.documents += docs
        corpus.queries += queries
        counts["indexed_bytes"] = sum(Path(d.path).stat().st_size for d in docs)
        corpus.facts["html"] = counts
    return corpus, defs


def add_mutants(
    corpus: Corpus, chunks: dict[str, list[Chunk]], defs: list[htmldocs.Definition], opts: Options
) -> dict[str, int]:
    """Mutated identifiers (HTML ids; man long options) verified absent from every stored chunk."""
    checker = AbsenceChecker(c.content for kb in chunks.values() for c in kb)
    kbs = corpus.kbs()
    man_kbs = sorted(kb for kb in kbs if kb.startswith("agent_quality_man_"))
    html_kbs = sorted(kb for kb in kbs if kb == "agent_quality_html")
    total = opts.sizes.mutants
    n_html = total // 2 if html_kbs and man_kbs else (total if html_kbs else 0)
    n_man = total - n_html if man_kbs else 0
    indexed_pages = {d.file_id for d in corpus.documents}
    made = {"mutated-identifier": 0, "mutated-option": 0}
    if n_html:
        idents = [d.ident for d in defs if d.page in indexed_pages]
        for mutant, original in mutants(idents, checker, n_html, opts.seed + 3):
            corpus.queries.append(
                Query(
                    qid=f"unans:ident:{mutant}",
                    set="unanswerable",
                    kind="mutated-identifier",
                    text=mutant,
                    kb=html_kbs[0],
                    relevant=(),
                    answerable=False,
                    note=original,
                )
            )
            made["mutated-identifier"] += 1
    if n_man:
        rng = random.Random(opts.seed + 4)
        options = long_options(c.content for kb in man_kbs for c in chunks[kb])
        for mutant, original in mutants(options, checker, n_man, opts.seed + 5):
            corpus.queries.append(
                Query(
                    qid=f"unans:option:{mutant}",
                    set="unanswerable",
                    kind="mutated-option",
                    text=mutant,
                    kb=rng.choice(man_kbs),
                    relevant=(),
                    answerable=False,
                    note=original,
                )
            )
            made["mutated-option"] += 1
    return made
