"""`python -m benchmarks.quality.natural.check [corpus ...] [--write] [--strict]`: prove every question.

For each corpus: its files exist (the Debian package installed, else an install hint), every
question line is valid (ids, fields, enums, split), its gold files are in the corpus, `answer` and
`evidence` occur verbatim in a gold file's rendered text after whitespace collapsing, `answer` lies
inside `evidence`, every absent term is absent from every file of the corpus (ignoring case), and a
paraphrase shares at most half of its content words with its evidence. Prints the counts per kind,
language and split and every failure with what to fix; exit 1 on any failure. The overall targets
(size, paraphrase, unanswerable and German shares) are printed met / not met, and fail the run only
with `--strict`. `--write` stores each paraphrase's `content_word_ratio` in its line.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.quality import manpages
from benchmarks.quality.natural import sets
from benchmarks.quality.natural.sets import ANSWERABLE, KINDS, LANGS, SPLITS, UNANSWERABLE, CorpusSpec
from benchmarks.quality.natural.text import (
    RENDERERS,
    TextCache,
    collapse,
    content_word_ratio,
    shared_content_words,
)
from benchmarks.service import REPO_ROOT

MAX_PARAPHRASE_RATIO = 0.5
ANSWER_CHARS = (3, 200)
KEYWORD_WORDS = (1, 4)
TOPIC_TERMS = (1, 3)
DEFAULT_CACHE = REPO_ROOT / "bench-results" / "natural-texts"
# something that reads as code: a dot, underscore or hyphen inside a word, (), --option, a path,
# camelCase
_CODE = re.compile(r"\w[._]\w|[a-z]-[a-z]|\(\)|(^|\s)--?\w|/\w|[a-z][A-Z]|\w::\w|\$\w|\w=\w")
# overall targets: (label, what is counted, needed share or count)
TARGET_ITEMS = 300
TARGET_SHARES = (("paraphrase", 0.30), ("unanswerable", 0.15), ("German (lang de)", 0.25))


@dataclass
class Problem:
    """One failure (or warning): which item, and what to fix."""

    item: str
    what: str

    def __str__(self) -> str:
        return f"{self.item}: {self.what}"


@dataclass
class CorpusReport:
    """What the checker found in one corpus."""

    name: str
    files: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)  # the valid-enough items (have a kind)
    item_lines: list[int] = field(default_factory=list)  # the line number of each of `items`
    failures: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    ratios: dict[int, float | None] = field(default_factory=dict)  # line number -> ratio to store
    ratio_by_id: dict[str, float] = field(default_factory=dict)
    failed_lines: set[int] = field(default_factory=set)  # lines with a failure of their own
    unavailable: str = ""  # the install hint when the corpus's package is missing

    def counts(self, key: str) -> Counter[str]:
        """Items per value of `key` (kind, lang, split)."""
        return Counter(str(i.get(key)) for i in self.items)


@dataclass
class Texts:
    """A corpus's rendered texts, collapsed, and their case-folded forms for the absence check."""

    by_path: dict[str, str]
    folded: dict[str, str]

    @classmethod
    def of(cls, texts: dict[str, str]) -> Texts:
        """From path -> rendered text."""
        collapsed = {p: collapse(t) for p, t in texts.items()}
        return cls(collapsed, {p: t.casefold() for p, t in collapsed.items()})

    def containing(self, term: str, *, fold: bool) -> list[str]:
        """Paths whose text contains `term` (collapsed; ignoring case when `fold`)."""
        needle = collapse(term)
        if not needle:
            return []
        if fold:
            needle = needle.casefold()
            return [p for p, t in self.folded.items() if needle in t]
        return [p for p, t in self.by_path.items() if needle in t]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def spec_problems(spec: CorpusSpec, expected: str) -> list[Problem]:
    """The corpus file's own fields (the files' existence is checked with the texts)."""
    where = spec.source.name
    out = []
    if spec.name != expected:
        out.append(Problem(where, f"name is {spec.name!r}, the file name says {expected!r}"))
    if spec.language not in LANGS:
        out.append(Problem(where, f"language must be one of {', '.join(LANGS)}, not {spec.language!r}"))
    if spec.render not in RENDERERS:
        out.append(Problem(where, f"render must be one of {', '.join(RENDERERS)}, not {spec.render!r}"))
    if not spec.files:
        out.append(Problem(where, "files is empty"))
    if list(spec.files) != sorted(spec.files):
        out.append(Problem(where, "files must be sorted"))
    dupes = sorted(p for p, n in Counter(spec.files).items() if n > 1)
    if dupes:
        out.append(Problem(where, f"files listed twice: {', '.join(dupes[:5])}"))
    return out


def file_problems(spec: CorpusSpec) -> list[Problem]:
    """Every listed file exists under the root (for man: a real page, not a symlink or `.so` stub)."""
    out = []
    for rel in spec.files:
        path = spec.root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            out.append(Problem(spec.source.name, f"{rel}: must be a path relative to root"))
        elif path.is_symlink():
            out.append(Problem(spec.source.name, f"{rel}: a symlink (list the page it points to)"))
        elif not path.is_file():
            out.append(Problem(spec.source.name, f"{rel}: no such file under {spec.root}"))
        elif spec.render == "man" and manpages.is_redirect(path):
            out.append(Problem(spec.source.name, f"{rel}: a .so redirect, not a real page"))
    return out


def _not_found_hint(needle: str, gold: Sequence[str], texts: Texts) -> str:
    """Why a span was not found in its gold files, as a hint: other case, other spacing, other file."""
    collapsed = collapse(needle)
    folded = collapsed.casefold()
    for path in gold:
        text = texts.by_path.get(path, "")
        if folded in texts.folded.get(path, ""):
            return f"it is in {path} with different case (case must match)"
        if _squash(collapsed) in _squash(text):
            return (
                f"it is in {path} with different spacing (spaces around markup or line breaks differ; "
                "copy from the checker's rendering: --show CORPUS:PATH)"
            )
    elsewhere = [p for p in texts.containing(needle, fold=False) if p not in gold]
    if elsewhere:
        return f"it is in {', '.join(elsewhere[:3])}, which is not among gold_files"
    return "no file of the corpus has it (check the rendering with --show CORPUS:PATH)"


def item_problems(
    raw: dict[str, Any], spec: CorpusSpec, texts: Texts, where: str
) -> tuple[list[Problem], list[Problem], float | None]:
    """(failures, warnings, content-word ratio of a paraphrase) of one question object."""
    fail: list[Problem] = []
    warn: list[Problem] = []

    def bad(what: str) -> None:
        fail.append(Problem(where, what))

    missing = [k for k in sets.REQUIRED if k not in raw]
    if missing:
        bad(f"missing field(s): {', '.join(missing)}")
    unknown = [k for k in raw if k not in sets.FIELDS]
    if unknown:
        warn.append(Problem(where, f"unknown field(s) ignored: {', '.join(unknown)}"))
    qid = raw.get("id")
    if not isinstance(qid, str) or not re.fullmatch(rf"{re.escape(spec.name)}-\d{{3,}}", qid):
        bad(f"id must be {spec.name}-NNN, not {qid!r}")
    if raw.get("corpus") != spec.name:
        bad(f"corpus must be {spec.name!r}, not {raw.get('corpus')!r}")
    lang, kind, split = raw.get("lang"), raw.get("kind"), raw.get("split")
    if lang not in LANGS:
        bad(f"lang must be one of {', '.join(LANGS)}, not {lang!r}")
    if kind not in KINDS:
        bad(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if split not in SPLITS:
        bad(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        bad("question must be a non-empty string")
        question = ""
    note = raw.get("note", "")
    if not isinstance(note, str):
        bad("note must be a string")
    stored = raw.get("content_word_ratio")
    if stored is not None and (isinstance(stored, bool) or not isinstance(stored, (int, float))):
        bad("content_word_ratio must be a number (the checker's; delete it and run --write)")
    gold = raw.get("gold_files")
    if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
        bad("gold_files must be a list of paths relative to the corpus root")
        gold = []
    location = raw.get("gold_location")
    if not isinstance(location, dict) or not {"section", "table_row"} <= set(location):
        bad('gold_location must be {"section": ..., "table_row": ...}')
        location = {}
    absent = raw.get("absent_terms")
    if not isinstance(absent, list) or not all(isinstance(t, str) for t in absent):
        bad("absent_terms must be a list of strings")
        absent = []
    answer, evidence = raw.get("answer"), raw.get("evidence")
    ratio: float | None = None
    if kind in UNANSWERABLE:
        if gold:
            bad("an unanswerable question has gold_files []")
        if answer not in (None, "") or evidence not in (None, ""):
            bad('an unanswerable question has no answer or evidence (null or "")')
        low, high = (1, 10) if kind == "unanswerable-named" else TOPIC_TERMS
        if not low <= len(absent) <= high:
            bad(f"{kind} needs {low}..{high} absent_terms, has {len(absent)}")
        for term in absent:
            if not term.strip():
                bad("an absent term is empty")
                continue
            found = texts.containing(term, fold=True)
            if found:
                more = f" and {len(found) - 3} more" if len(found) > 3 else ""
                bad(
                    f"absent term {term!r} occurs in {', '.join(found[:3])}{more} (ignoring case): "
                    "choose another thing or term"
                )
    elif kind in ANSWERABLE:
        if absent:
            bad("absent_terms is for unanswerable questions only: set []")
        if not gold:
            bad("an answerable question names at least one gold file")
        outside = [g for g in gold if g not in spec.files]
        if outside:
            bad(f"gold file(s) not in {spec.source.name}: {', '.join(outside)}")
        gold_in = [g for g in gold if g in texts.by_path]
        section = location.get("section")
        if not isinstance(section, str) or not section.strip():
            bad("gold_location.section must be the heading the answer is under")
        elif gold_in and not any(
            collapse(section).casefold() in texts.folded[g] for g in gold_in
        ):  # a heading is printed as written; a miss is usually a typo, not a wrong answer
            warn.append(Problem(where, f"section {section!r} is not printed in {', '.join(gold_in)}"))
        table_row = location.get("table_row")
        if kind == "table" and (not isinstance(table_row, str) or not table_row.strip()):
            bad("a table question names its row: gold_location.table_row")
        if not isinstance(answer, str) or not ANSWER_CHARS[0] <= len(collapse(answer)) <= ANSWER_CHARS[1]:
            bad(f"answer must be a string of {ANSWER_CHARS[0]}..{ANSWER_CHARS[1]} characters")
            answer = None
        if not isinstance(evidence, str) or not collapse(evidence):
            bad("evidence must be a non-empty string")
            evidence = None
        if answer is not None and gold_in:
            if not any(collapse(answer) in texts.by_path[g] for g in gold_in):
                hint = _not_found_hint(answer, gold_in, texts)
                bad(f"answer not found verbatim in {', '.join(gold_in)}: {hint}")
        if evidence is not None and gold_in:
            if not any(collapse(evidence) in texts.by_path[g] for g in gold_in):
                bad(
                    f"evidence not found verbatim in {', '.join(gold_in)}: "
                    f"{_not_found_hint(evidence, gold_in, texts)}"
                )
        if answer is not None and evidence is not None and collapse(answer) not in collapse(evidence):
            bad("answer is not inside evidence (copy the evidence around the answer)")
        if kind == "keyword" and question:
            n = len(question.split())
            if not KEYWORD_WORDS[0] <= n <= KEYWORD_WORDS[1]:
                bad(f"a keyword query has {KEYWORD_WORDS[0]}..{KEYWORD_WORDS[1]} words, this has {n}")
        if kind == "identifier" and question and not _CODE.search(question):
            warn.append(Problem(where, "identifier question: no word in it looks like code"))
        if kind == "paraphrase" and question and evidence is not None and lang in LANGS:
            ratio = round(content_word_ratio(question, evidence, lang), 3)
            if ratio > MAX_PARAPHRASE_RATIO:
                shared = ", ".join(shared_content_words(question, evidence, lang))
                bad(
                    f"paraphrase shares {ratio:.2f} of its content words with the evidence (at most "
                    f"{MAX_PARAPHRASE_RATIO}): reword {shared}"
                )
            elif isinstance(stored, (int, float)) and abs(float(stored) - ratio) > 5e-4:
                warn.append(Problem(where, f"content_word_ratio {stored} is stale ({ratio}): run --write"))
    return fail, warn, ratio


def passing(report: CorpusReport) -> list[dict[str, Any]]:
    """The items without a failure of their own (what a run asks)."""
    return [i for i, n in zip(report.items, report.item_lines, strict=True) if n not in report.failed_lines]


def load_texts(spec: CorpusSpec, cache: TextCache, say: Callable[[str], None] = lambda _m: None) -> Texts:
    """Every listed file that exists, rendered (from the cache when it can)."""
    present = [rel for rel in spec.files if (spec.root / rel).is_file()]
    rendered = cache.many([spec.root / rel for rel in present], spec.render, say=say)
    return Texts.of(dict(zip(present, rendered, strict=True)))


def check_corpus(
    name: str,
    folder: Path,
    cache: TextCache,
    say: Callable[[str], None] = lambda _m: None,
) -> CorpusReport:
    """Everything the module docstring lists, for one corpus."""
    report = CorpusReport(name)
    try:
        spec = sets.load_corpus(name, folder)
    except sets.SetError as exc:
        report.failures.append(Problem(f"{name}.corpus.json", str(exc)))
        return report
    report.files = len(spec.files)
    report.failures += spec_problems(spec, name)
    if not spec.root.is_dir():
        report.unavailable = spec.install_hint()
        report.failures.append(Problem(spec.source.name, report.unavailable))
        return report
    if spec.render not in RENDERERS:
        return report
    report.failures += file_problems(spec)
    texts = load_texts(spec, cache, say)
    seen: dict[str, int] = {}
    for line in sets.load_lines(sets.questions_path(name, folder)):
        where = f"line {line.number}"
        if line.raw is None:
            report.failures.append(Problem(where, line.error))
            continue
        qid = line.raw.get("id")
        if isinstance(qid, str):
            where = f"{qid} (line {line.number})"
            if qid in seen:
                report.failures.append(Problem(where, f"id used twice (first on line {seen[qid]})"))
                report.failed_lines.add(line.number)
            else:
                seen[qid] = line.number
        fail, warn, ratio = item_problems(line.raw, spec, texts, where)
        report.failures += fail
        report.warnings += warn
        if fail:
            report.failed_lines.add(line.number)
        if line.raw.get("kind") in KINDS:
            report.items.append(line.raw)
            report.item_lines.append(line.number)
        if ratio is not None:
            report.ratio_by_id[str(qid)] = ratio
        # a paraphrase gets its ratio; any other kind loses a stale one
        report.ratios[line.number] = ratio if line.raw.get("kind") == "paraphrase" else None
    return report


def targets(reports: Sequence[CorpusReport]) -> list[tuple[str, str, str, bool]]:
    """The overall targets: (what, value, needed, met)."""
    items = [i for r in reports for i in r.items]
    n = len(items)
    shares = {
        "paraphrase": sum(i.get("kind") == "paraphrase" for i in items),
        "unanswerable": sum(i.get("kind") in UNANSWERABLE for i in items),
        "German (lang de)": sum(i.get("lang") == "de" for i in items),
    }
    out = [("items", str(n), f">= {TARGET_ITEMS}", n >= TARGET_ITEMS)]
    for label, needed in TARGET_SHARES:
        share = shares[label] / n if n else 0.0
        value = f"{100 * share:.1f} % ({shares[label]})"
        out.append((f"{label} share", value, f">= {needed:.0%}", share >= needed))
    named = sum(i.get("kind") == "unanswerable-named" for i in items)
    topic = sum(i.get("kind") == "unanswerable-topic" for i in items)
    # "half named, half topic": apart by at most a quarter of them (or 2, for small sets)
    balanced = min(named, topic) > 0 and abs(named - topic) <= max(2, (named + topic) / 4)
    out.append(("unanswerable named / topic", f"{named} / {topic}", "about half each", balanced))
    return out


def _counts_line(counter: Counter[str], order: Sequence[str]) -> str:
    known = [f"{k} {counter[k]}" for k in order if counter[k]]
    other = [f"{k} {n}" for k, n in sorted(counter.items()) if k not in order]
    return ", ".join(known + other) or "none"


def format_report(report: CorpusReport) -> list[str]:
    """The printed lines of one corpus."""
    out = [f"== {report.name}: {report.files} files, {len(report.items)} questions"]
    if report.items:
        out.append(f"   kind:  {_counts_line(report.counts('kind'), KINDS)}")
        out.append(f"   lang:  {_counts_line(report.counts('lang'), LANGS)}")
        out.append(f"   split: {_counts_line(report.counts('split'), SPLITS)}")
        per_kind = Counter((str(i.get("kind")), str(i.get("split"))) for i in report.items)
        cells = [f"{k} {per_kind[k, 'dev']}/{per_kind[k, 'test']}" for k in KINDS if report.counts("kind")[k]]
        out.append(f"   dev/test per kind (about 40/60): {', '.join(cells)}")
        missing = [k for k in KINDS if not report.counts("kind")[k]]
        if missing:
            out.append(f"   kinds not present yet: {', '.join(missing)}")
    if report.ratio_by_id:
        values = sorted(report.ratio_by_id.values())
        out.append(
            f"   paraphrase content-word ratio: median {values[len(values) // 2]:.2f}, max {values[-1]:.2f}"
        )
        pairs = [f"{qid.rsplit('-', 1)[-1]}={r:.2f}" for qid, r in report.ratio_by_id.items()]
        out += textwrap.wrap(
            ", ".join(pairs), 100, initial_indent="     per id: ", subsequent_indent=" " * 13
        )
    for p in report.failures:
        out.append(f"   FAIL {p}")
    for p in report.warnings:
        out.append(f"   warn {p}")
    out.append(f"   {report.name}: {len(report.failures)} failure(s), {len(report.warnings)} warning(s)")
    return out


def _progress(name: str) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"   {name}: {message}", file=sys.stderr, flush=True)

    return say


def main(argv: Sequence[str] | None = None) -> int:
    """Check the named corpora (default: every corpus file beside this module)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.quality.natural.check",
        description="Prove every natural question against the rendered corpus text.",
    )
    p.add_argument("corpora", nargs="*", help="corpus names (default: every *.corpus.json)")
    p.add_argument("--write", action="store_true", help="store content_word_ratio in each paraphrase line")
    p.add_argument("--strict", action="store_true", help="unmet overall targets fail the run too")
    p.add_argument("--folder", type=Path, default=sets.HERE, help="where the set files are (%(default)s)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="rendered texts (%(default)s)")
    p.add_argument(
        "--show",
        metavar="CORPUS:PATH",
        default=None,
        help="print one file's rendered text, whitespace collapsed (what answers are compared with)",
    )
    a = p.parse_args(argv)
    cache = TextCache(a.cache)
    if a.show:
        name, _, rel = a.show.partition(":")
        try:
            spec = sets.load_corpus(name, a.folder)
        except sets.SetError as exc:
            print(exc, file=sys.stderr)
            return 1
        if rel not in spec.files:
            print(f"{rel!r} is not a file of {name}", file=sys.stderr)
            return 1
        if not (spec.root / rel).is_file():
            print(spec.install_hint(), file=sys.stderr)
            return 1
        print(collapse(cache.get(spec.root / rel, spec.render)))
        return 0
    names = a.corpora or sets.corpus_names(a.folder)
    if not names:
        print(f"no *.corpus.json in {a.folder}", file=sys.stderr)
        return 1
    reports = []
    ids: dict[str, str] = {}
    for name in names:
        report = check_corpus(name, a.folder, cache, say=_progress(name))
        for item in report.items:
            qid = item.get("id")
            if isinstance(qid, str) and ids.setdefault(qid, name) != name:
                report.failures.append(Problem(qid, f"id also used in {ids[qid]}"))
        reports.append(report)
        print("\n".join(format_report(report)))
        if a.write and report.ratios and not report.unavailable:
            if sets.write_ratios(sets.questions_path(name, a.folder), report.ratios):
                print(f"   wrote content_word_ratio into {name}.questions.jsonl")
    rows = targets(reports)
    print("== targets over " + ", ".join(names) + ":")
    for what, value, needed, met in rows:
        print(f"   {what}: {value} (needed {needed}): {'met' if met else 'not met'}")
    failures = sum(len(r.failures) for r in reports)
    unmet = sum(not met for *_, met in rows)
    print(f"== {failures} failure(s); {unmet} target(s) not met{' (strict)' if a.strict and unmet else ''}")
    return 1 if failures or (a.strict and unmet) else 0


if __name__ == "__main__":
    sys.exit(main())
