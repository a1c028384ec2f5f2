"""Scores of the natural questions (pure): per item, per corpus x kind, overall, and the targets.

Per answerable item and system:
- `first`: the first file of the answer's file ranking is a gold file (any gold file answers, so
  this is R@1 with the gold files as alternatives);
- `top5`: a gold file is among the first five files;
- `answer`: the answer occurs in the text of a returned passage, both whitespace-collapsed
  (`answer_caseless`: the same, ignoring case);
- `refused`: the system refused (V2's `safe_refusal` with no results; V1 never refuses).
A refused answerable item returns nothing, so its other scores are misses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.quality.metrics import file_ranking
from benchmarks.quality.natural.sets import ANSWERABLE, UNANSWERABLE
from benchmarks.quality.natural.text import collapse

TOP = 5
V1 = "v1-dense"
V2 = "query_v2"
# the targets (V2 against V1 in the same run)
FIRST_MARGIN = 0.05
ANSWER_MARGIN = 0.05
FALSE_REFUSALS_AT_MOST = 0.02
NAMED_REFUSED_AT_LEAST = 0.95
TOPIC_REFUSED_AT_LEAST = 0.40


@dataclass(frozen=True)
class Scored:
    """One item's outcome for one system."""

    qid: str
    corpus: str
    kind: str
    answerable: bool
    refused: bool
    ranking: tuple[str, ...]  # file ranking of the returned passages (first 10 files)
    first: bool
    top5: bool
    answer: bool
    answer_caseless: bool


def answer_found(answer: str, passages: Iterable[str], *, caseless: bool = False) -> bool:
    """True when the collapsed answer occurs in a collapsed passage (ignoring case: `caseless`)."""
    needle = collapse(answer)
    if caseless:
        needle = needle.casefold()
    if not needle:
        return False
    for text in passages:
        hay = collapse(text)
        if needle in (hay.casefold() if caseless else hay):
            return True
    return False


def score(
    *,
    qid: str,
    corpus: str,
    kind: str,
    gold: Iterable[str],
    answer: str | None,
    refused: bool,
    passage_files: Sequence[str],
    passage_texts: Sequence[str],
) -> Scored:
    """Score one answer (see the module docstring); unanswerable items only carry `refused`."""
    answerable = kind not in UNANSWERABLE
    ranking = tuple(file_ranking(passage_files))[:10]
    golds = set(gold)
    found = answerable and answer is not None and answer_found(answer, passage_texts)
    caseless = answerable and answer is not None and answer_found(answer, passage_texts, caseless=True)
    return Scored(
        qid=qid,
        corpus=corpus,
        kind=kind,
        answerable=answerable,
        refused=refused,
        ranking=ranking,
        first=answerable and bool(ranking) and ranking[0] in golds,
        top5=answerable and bool(golds.intersection(ranking[:TOP])),
        answer=found,
        answer_caseless=caseless,
    )


@dataclass
class Aggregate:
    """Means over a group of scored items (None where the group has none of that sort)."""

    items: int = 0
    answerable: int = 0
    unanswerable: int = 0
    first: float | None = None
    top5: float | None = None
    answer: float | None = None
    answer_caseless: float | None = None
    answerable_refused: float | None = None  # false refusals
    unanswerable_refused: float | None = None


def _mean(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def aggregate(scored: Sequence[Scored]) -> Aggregate:
    """Rates over the answerable and the unanswerable items of `scored`."""
    ans = [s for s in scored if s.answerable]
    una = [s for s in scored if not s.answerable]
    return Aggregate(
        items=len(scored),
        answerable=len(ans),
        unanswerable=len(una),
        first=_mean([s.first for s in ans]),
        top5=_mean([s.top5 for s in ans]),
        answer=_mean([s.answer for s in ans]),
        answer_caseless=_mean([s.answer_caseless for s in ans]),
        answerable_refused=_mean([s.refused for s in ans]),
        unanswerable_refused=_mean([s.refused for s in una]),
    )


def group_keys(s: Scored) -> list[str]:
    """The report groups an item belongs to: `<corpus>/<kind>`, `kind:<kind>`, `<corpus>`, answerable
    or unanswerable, and `all`."""
    return [
        f"{s.corpus}/{s.kind}",
        f"kind:{s.kind}",
        s.corpus,
        "answerable" if s.answerable else "unanswerable",
        "all",
    ]


def summarise(by_system: Mapping[str, Sequence[Scored]]) -> dict[str, dict[str, dict[str, Any]]]:
    """system -> group -> Aggregate fields."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for system, scored in by_system.items():
        groups: dict[str, list[Scored]] = {}
        for s in scored:
            for key in group_keys(s):
                groups.setdefault(key, []).append(s)
        out[system] = {k: asdict(aggregate(v)) for k, v in sorted(groups.items())}
    return out


def _row(target: str, group: str, value: float | None, needed: str, met: bool | None) -> dict[str, Any]:
    return {"target": target, "group": group, "value": value, "needed": needed, "met": met}


def targets(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The targets, one row each, met / not met (None: not measured in this run). Ties are met."""
    v1, v2 = summary.get(V1, {}), summary.get(V2, {})
    rows = []
    for kind in ANSWERABLE:
        a, b = v1.get(f"kind:{kind}"), v2.get(f"kind:{kind}")
        if not a or not b or not a["answerable"]:
            continue
        rows.append(
            _row(
                "V2 right file first >= V1 + 0.05",
                kind,
                b["first"],
                f">= {a['first'] + FIRST_MARGIN:.3f}",
                b["first"] >= a["first"] + FIRST_MARGIN - 1e-12,
            )
        )
        rows.append(
            _row("V2 top 5 >= V1", kind, b["top5"], f">= {a['top5']:.3f}", b["top5"] >= a["top5"] - 1e-12)
        )
    a, b = v1.get("answerable"), v2.get("answerable")
    if a and b and a["answer"] is not None:
        rows.append(
            _row(
                "V2 answer in passage >= V1 + 0.05",
                "answerable",
                b["answer"],
                f">= {a['answer'] + ANSWER_MARGIN:.3f}",
                b["answer"] >= a["answer"] + ANSWER_MARGIN - 1e-12,
            )
        )
    false = (v2.get("answerable") or {}).get("answerable_refused")
    if false is not None:
        rows.append(
            _row(
                "V2 false refusals",
                "answerable",
                false,
                f"<= {FALSE_REFUSALS_AT_MOST:.0%}",
                false <= FALSE_REFUSALS_AT_MOST + 1e-12,
            )
        )
    for kind, needed in (
        ("unanswerable-named", NAMED_REFUSED_AT_LEAST),
        ("unanswerable-topic", TOPIC_REFUSED_AT_LEAST),
    ):
        value = (v2.get(f"kind:{kind}") or {}).get("unanswerable_refused")
        if value is not None:
            rows.append(_row("V2 refused", kind, value, f">= {needed:.0%}", value >= needed - 1e-12))
    return rows
