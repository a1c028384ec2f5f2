"""Scoring of the natural questions on hand-made answers (no service)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.quality.natural import scoring
from benchmarks.quality.natural.bench import choose_files, kb_name, select_items, upload_name
from benchmarks.quality.natural.report import text as report_text
from benchmarks.quality.natural.scoring import Scored, aggregate, answer_found, score, summarise, targets
from benchmarks.quality.natural.sets import CorpusSpec


def _s(
    kind: str, files: list[str], texts: list[str] | None = None, refused: bool = False, qid: str = "q"
) -> Scored:
    return score(
        qid=qid,
        corpus="docs",
        kind=kind,
        gold=["g.html", "h.html"],
        answer="Return the number of CPUs" if not kind.startswith("unanswerable") else None,
        refused=refused,
        passage_files=files,
        passage_texts=texts if texts is not None else ["x"] * len(files),
    )


def test_answer_found_collapses_whitespace_and_counts_case_separately() -> None:
    passages = ["os.cpu_count()\n   Return the  number of\nCPUs in the system."]
    assert answer_found("Return the number of CPUs", passages)
    assert not answer_found("return the number of cpus", passages)
    assert answer_found("return the number of cpus", passages, caseless=True)
    assert not answer_found("Return the number of cores", passages, caseless=True)
    assert not answer_found("  ", passages)


def test_score_of_one_answer() -> None:
    # file ranking a, g, a, b -> a, g, b: a gold file is 2nd (not first), inside the top 5
    s = _s("paraphrase", ["a", "g.html", "a", "b"], ["x", "Return the number  of CPUs", "y", "z"])
    assert (s.first, s.top5, s.answer, s.answer_caseless) == (False, True, True, True)
    assert s.ranking == ("a", "g.html", "b")
    # either gold file counts; the gold file sixth is outside the top 5
    assert _s("table", ["h.html"]).first
    assert not _s("table", ["a", "b", "c", "d", "e", "g.html"]).top5
    # an unanswerable item only carries its refusal
    u = _s("unanswerable-named", ["g.html"], refused=False)
    assert (u.answerable, u.first, u.top5, u.answer) == (False, False, False, False)


def test_aggregate_rates() -> None:
    scored = [
        _s("paraphrase", ["g.html"], ["Return the number of CPUs"]),  # first, top5, answer
        _s("paraphrase", ["a", "h.html"], ["return the number of cpus", "x"]),  # top5, any-case answer
        _s("paraphrase", [], [], refused=True),  # a false refusal: a miss everywhere
        _s("paraphrase", ["a"]),  # a plain miss
        _s("unanswerable-named", [], [], refused=True),
        _s("unanswerable-named", ["a"]),
    ]
    a = aggregate(scored)
    # answerable: 4; first 1/4; top5 2/4; answer 1/4 exact, 2/4 ignoring case; refused 1/4
    assert (a.items, a.answerable, a.unanswerable) == (6, 4, 2)
    assert a.first == 0.25 and a.top5 == 0.5
    assert a.answer == 0.25 and a.answer_caseless == 0.5
    assert a.answerable_refused == 0.25
    # unanswerable: 1 of 2 refused
    assert a.unanswerable_refused == 0.5
    assert aggregate([]).first is None


def _system(
    first: int, top5: int, answer: int, refused: int, named_refused: int, topic_refused: int
) -> list[Scored]:
    """20 paraphrase items (the first `first` right first, `top5` in the top 5, `answer` with the answer,
    the last `refused` refused), 20 named and 10 topic unanswerable items (the first n refused)."""
    out = []
    for i in range(20):
        right = ["g.html"] if i < first else (["a", "g.html"] if i < top5 else ["a"])
        texts = ["Return the number of CPUs" if i < answer else "x"] * len(right)
        if i >= 20 - refused:
            right, texts = [], []
        out.append(_s("paraphrase", right, texts, refused=i >= 20 - refused, qid=f"p{i}"))
    out += [_s("unanswerable-named", [], [], refused=i < named_refused, qid=f"n{i}") for i in range(20)]
    out += [_s("unanswerable-topic", [], [], refused=i < topic_refused, qid=f"t{i}") for i in range(10)]
    return out


def test_targets_met_and_not_met() -> None:
    v1 = _system(first=10, top5=14, answer=8, refused=0, named_refused=0, topic_refused=0)
    # V2: first 12/20 = 0.60 >= 0.50 + 0.05; top5 15/20 >= 14/20; answer 10/20 = 0.50 >= 0.40 + 0.05;
    # no false refusal; named 19/20 = 95 % >= 95 %; topic 4/10 = 40 % >= 40 %: every target met
    v2 = _system(first=12, top5=15, answer=10, refused=0, named_refused=19, topic_refused=4)
    rows = targets(summarise({scoring.V1: v1, scoring.V2: v2}))
    assert [(r["target"], r["group"]) for r in rows] == [
        ("V2 right file first >= V1 + 0.05", "paraphrase"),
        ("V2 top 5 >= V1", "paraphrase"),
        ("V2 answer in passage >= V1 + 0.05", "answerable"),
        ("V2 false refusals", "answerable"),
        ("V2 refused", "unanswerable-named"),
        ("V2 refused", "unanswerable-topic"),
    ]
    assert all(r["met"] for r in rows)
    # V2: first 11/20 = 0.55, equal to 0.50 + 0.05: met; top5 13/20 < 14/20: not met; answer 9/20 =
    # 0.45 = 0.40 + 0.05: met;
    # one refusal of 20 = 5 % > 2 %: not met (and it is the 20th item, a miss everywhere);
    # named 18/20 = 90 %: not met; topic 3/10 = 30 %: not met
    worse = _system(first=11, top5=13, answer=9, refused=1, named_refused=18, topic_refused=3)
    met = [r["met"] for r in targets(summarise({scoring.V1: v1, scoring.V2: worse}))]
    assert met == [True, False, True, False, False, False]


def test_report_prints_every_group_and_target() -> None:
    v1 = _system(first=10, top5=14, answer=8, refused=0, named_refused=0, topic_refused=0)
    v2 = _system(first=12, top5=15, answer=10, refused=0, named_refused=19, topic_refused=4)
    summary = summarise({scoring.V1: v1, scoring.V2: v2, "v2:lexical": v2})
    result = {
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 1.0,
        "options": {"split": "dev", "quick": True},
        "corpus": {"corpora": {"docs": {"files": 3, "questions": 50, "excluded": 1}}},
        "summary": summary,
        "targets": targets(summary),
    }
    out = report_text(result)
    assert "docs: 3 files, 50 questions (1 failing the checker left out)" in out
    assert "0.500 0.600" in out  # first V1 beside V2 on the paraphrase row
    assert "95.0%" in out and "40.0%" in out
    assert "v2:lexical" in out
    assert out.count(" met") >= 6 and "NOT MET" not in out


def test_quick_files_and_names(tmp_path: Path) -> None:
    spec = CorpusSpec(
        name="manpages-de",
        language="de",
        package="manpages-de",
        root=tmp_path,
        render="man",
        files=tuple(f"man1/p{i:03d}.1.gz" for i in range(100)),
        source=tmp_path,
    )
    gold = {"man1/p007.1.gz", "man1/p093.1.gz"}
    chosen = choose_files(spec, gold, others=40, seed=1)
    # the gold files and 40 others, sorted; the same seed draws the same sample
    assert len(chosen) == 42 and gold <= set(chosen) and chosen == sorted(chosen)
    assert chosen == choose_files(spec, gold, others=40, seed=1)
    assert choose_files(spec, gold, others=None, seed=1) == list(spec.files)
    assert choose_files(spec, gold, others=500, seed=1) == list(spec.files)
    assert upload_name(spec, "man1/ls.1.gz") == "ls.1.txt"
    assert kb_name("debian-reference-de") == "agent_nat_debian_reference_de"
    items = [{"split": "dev"}, {"split": "test"}]
    assert select_items(items, "dev") == [{"split": "dev"}]
    assert select_items(items, "all") == items
