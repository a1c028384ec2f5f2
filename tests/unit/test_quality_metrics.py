"""The quality benchmark's pure parts: metrics, reference BM25, RRF, mutations, page parsing."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.quality import htmldocs, manpages
from benchmarks.quality.bm25 import BM25, rrf, tokenize
from benchmarks.quality.metrics import (
    answer_in_passages,
    file_ranking,
    judge,
    ndcg_at_k,
    normalise,
    percentile,
    recall_at_k,
    reciprocal_rank,
    squash,
    summarise,
)
from benchmarks.quality.report import markdown
from benchmarks.quality.unanswerable import AbsenceChecker, long_options, mutants, mutate

# ---- metrics ---------------------------------------------------------------------------------


def test_file_ranking_keeps_first_occurrence_order() -> None:
    assert file_ranking(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def test_recall_at_k() -> None:
    ranking = ["x", "r1", "y", "r2"]
    # one relevant file: found at rank 2, so @1 misses and @2 hits
    assert recall_at_k(ranking, {"r1"}, 1) == 0.0
    assert recall_at_k(ranking, {"r1"}, 2) == 1.0
    # two relevant files: @3 finds r1 only = 1/2; @4 finds both = 2/2
    assert recall_at_k(ranking, {"r1", "r2"}, 3) == 0.5
    assert recall_at_k(ranking, {"r1", "r2"}, 4) == 1.0
    assert recall_at_k(ranking, set(), 10) == 0.0


def test_reciprocal_rank() -> None:
    # first relevant at rank 3 -> 1/3
    assert reciprocal_rank(["a", "b", "r"], {"r"}) == pytest.approx(1 / 3)
    # beyond the cut-off it counts as absent
    assert reciprocal_rank(["a", "b", "r"], {"r"}, k=2) == 0.0
    assert reciprocal_rank([], {"r"}) == 0.0


def test_ndcg_single_relevant() -> None:
    # rank 1: 1/log2(2) = 1 over ideal 1 -> 1.0
    assert ndcg_at_k(["r", "a"], {"r"}) == 1.0
    # rank 3: 1/log2(4) = 0.5 over ideal 1 -> 0.5
    assert ndcg_at_k(["a", "b", "r"], {"r"}) == pytest.approx(0.5)
    # rank 11 is outside @10 -> 0
    assert ndcg_at_k([*"abcdefghij", "r"], {"r"}) == 0.0


def test_ndcg_two_relevant() -> None:
    # hits at ranks 1 and 3: DCG = 1 + 1/log2(4) = 1.5; ideal (ranks 1, 2) = 1 + 1/log2(3) = 1.6309...
    got = ndcg_at_k(["r1", "a", "r2"], {"r1", "r2"})
    assert got == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert got == pytest.approx(0.91972, abs=1e-5)


def test_normalise_and_squash() -> None:
    # NFKC folds the ligature, case-fold, the pilcrow and soft hyphen go, whitespace collapses
    assert normalise("  The \ufb01le¶\u00ad  NAME\n x ") == "the file name x"
    assert squash("sys. __breakpointhook__ ( )") == "sys.__breakpointhook__()"


def test_answer_in_passages_ignores_spacing_and_case() -> None:
    passages = ["x + y | Sum of  x and y |", "other"]
    assert answer_in_passages("sum of x and y", passages)
    assert answer_in_passages("Sum of x and y", ["x + y | sum of x\nand y"])
    assert not answer_in_passages("product of x and y", passages)
    assert not answer_in_passages("  ", passages)  # an empty answer is never "found"


def test_percentile_interpolates() -> None:
    # 4 values: p50 sits halfway between the 2nd and 3rd (2 and 3) -> 2.5
    assert percentile([4, 1, 3, 2], 50) == 2.5
    # p95: position 0.95 * 3 = 2.85 -> 3 + 0.85 * (4 - 3) = 3.85
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert percentile([], 50) is None


def _judged(
    ranking: list[str],
    relevant: set[str],
    *,
    answerable: bool = True,
    refused: bool = False,
    answer: str | None = None,
    texts: list[str] | None = None,
    ms: float = 1.0,
):
    return judge(
        answerable=answerable,
        refused=refused,
        passage_files=ranking,
        passage_texts=texts or ["" for _ in ranking],
        relevant=relevant,
        answer=answer,
        latency_ms=ms,
    )


def test_summarise_means_and_refusals() -> None:
    results = [
        # hit at rank 1: R@1 1, RR 1, nDCG 1; answer found
        _judged(["r", "a"], {"r"}, answer="alpha", texts=["the alpha", "b"], ms=10),
        # hit at rank 2: R@1 0, R@5 1, RR 0.5, nDCG 1/log2(3) = 0.6309; answer missing
        _judged(["a", "r"], {"r"}, answer="beta", texts=["x", "y"], ms=20),
        # refused although answerable: every ranking metric 0, a false refusal
        _judged([], {"r"}, refused=True, ms=30),
        # unanswerable, refused
        _judged([], set(), answerable=False, refused=True, ms=40),
        # unanswerable, answered anyway
        _judged(["a"], set(), answerable=False, ms=50),
    ]
    s = summarise(results)
    assert (s.queries, s.answerable, s.unanswerable) == (5, 3, 2)
    assert s.recall_at_1 == pytest.approx(1 / 3)  # (1 + 0 + 0) / 3
    assert s.recall_at_5 == pytest.approx(2 / 3)  # (1 + 1 + 0) / 3
    assert s.mrr == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    assert s.ndcg_at_10 == pytest.approx((1 + 1 / math.log2(3)) / 3)
    assert s.answer_in_passage == 0.5 and s.answer_queries == 2  # alpha found, beta not
    assert s.false_refusal_rate == pytest.approx(1 / 3)
    assert s.refusal_rate == 0.5  # 1 of 2 unanswerable refused
    assert s.latency_p50_ms == 30.0  # median of 10..50
    assert s.latency_p95_ms == pytest.approx(48.0)  # 40 + 0.8 * 10


def test_summarise_of_nothing_has_no_figures() -> None:
    s = summarise([])
    assert s.queries == 0 and s.recall_at_1 is None and s.latency_p50_ms is None


# ---- reference BM25 and RRF -------------------------------------------------------------------


def test_tokenize_folds_and_drops_stopwords() -> None:
    assert tokenize("The os.path.JOIN of Straße") == ["os", "path", "join", "strasse"]  # casefold: ß -> ss


def test_bm25_matches_a_hand_computation() -> None:
    docs = ["apple banana", "apple apple cherry", "banana cherry date eggplant"]
    index = BM25(docs, k1=1.2, b=0.75)
    # N = 3, lengths 2, 3, 4 -> avgdl 3. "apple": df 2 -> idf = ln(1 + (3 - 2 + 0.5) / 2.5) = ln 1.6
    idf = math.log(1.6)
    assert index.idf("apple") == pytest.approx(idf)
    scores = index.scores("apple")
    # doc 0: tf 1, dl 2: 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2/3)) = 2.2 / 1.9
    assert scores[0] == pytest.approx(idf * 2.2 / 1.9)
    # doc 1: tf 2, dl 3: 2 * 2.2 / (2 + 1.2 * 1) = 4.4 / 3.2
    assert scores[1] == pytest.approx(idf * 4.4 / 3.2)
    assert scores[2] == 0.0
    # "date": df 1 -> idf ln(1 + 2.5 / 1.5) = ln(8/3); doc 2: tf 1, dl 4: 2.2 / (1 + 1.2 * 1.25) = 2.2 / 2.5
    assert index.scores("date")[2] == pytest.approx(math.log(8 / 3) * 2.2 / 2.5)
    hits = index.search("apple date", k=5)
    assert [h.index for h in hits] == [2, 1, 0]  # 0.863 > 0.646 > 0.547
    assert index.search("zebra", k=5) == []


def test_bm25_counts_a_repeated_query_term_once_and_breaks_ties_by_index() -> None:
    index = BM25(["alpha beta", "beta alpha"])
    assert index.scores("alpha alpha").tolist() == index.scores("alpha").tolist()
    assert [h.index for h in index.search("alpha", k=2)] == [0, 1]


def test_rrf_arithmetic() -> None:
    fused = rrf([["a", "b", "c"], ["b", "d"]], k=60)
    scores = dict(fused)
    # a: 1/61; b: 1/62 + 1/61; c: 1/63; d: 1/62
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61)
    assert [key for key, _ in fused] == ["b", "a", "d", "c"]


def test_rrf_weights_duplicates_and_ties() -> None:
    # a duplicate within one list counts once, at its first rank
    assert dict(rrf([["a", "a", "b"]], k=1))["b"] == pytest.approx(1 / 4)  # b is 3rd: 1 / (1 + 3)
    # weight 2 on the second list: x = 1/11, y = 2/11
    assert [k for k, _ in rrf([["x"], ["y"]], k=10, weights=[1, 2])] == ["y", "x"]
    # equal scores keep the order keys were first met
    assert [k for k, _ in rrf([["p"], ["q"]], k=10)] == ["p", "q"]
    with pytest.raises(ValueError):
        rrf([["a"]], weights=[1, 2])


# ---- unanswerable identifiers ------------------------------------------------------------------


def test_mutate_changes_only_the_last_part() -> None:
    rng = random.Random(1)
    for _ in range(50):
        m = mutate("os.path.join", rng)
        assert m.startswith("os.path.")
        _head, part = m.rsplit(".", 1)
        assert part[0] == "j" and part[-1] == "n"  # first and last letters kept
    assert mutate("os.ab", rng) is None  # nothing of 4+ letters to change


def test_mutants_are_verified_absent() -> None:
    corpus = ["Use os.path.join(a, b) to join.", "The --no-clobber option keeps files; see jion too."]
    checker = AbsenceChecker(corpus)
    assert not checker.absent("os.path.join")  # occurs
    assert not checker.absent("os.path.jion")  # new string, but "jion" is a word of the corpus
    assert checker.absent("os.path.jwin")
    made = mutants(["os.path.join", "--no-clobber"], checker, count=2, seed=7)
    assert len(made) == 2
    for mutant, original in made:
        assert mutant != original and checker.absent(mutant)


def test_long_options() -> None:
    text = "Use --no-clobber or --dry-run, not -n or --x or --verbose; see foo--bar-baz."
    assert long_options([text]) == ["--no-clobber", "--dry-run"]


# ---- man pages and HTML pages -------------------------------------------------------------------

RENDERED = """LS(1)                        User Commands                        LS(1)

NAME
       ls, dir - list directory
       contents

SYNOPSIS
       ls [OPTION]... [FILE]...

DESCRIPTION
       List information about the FILEs.
"""


def test_split_name_section_removes_the_description() -> None:
    names, description, text = manpages.split_name_section(RENDERED)
    assert names == "ls, dir"
    assert description == "list directory contents"
    assert "list directory" not in text and "NAME\n       ls, dir\n" in text
    assert "SYNOPSIS" in text and "List information about the FILEs." in text


def test_split_name_section_needs_a_dash() -> None:
    assert manpages.split_name_section("NAME\n       ls\n\nSYNOPSIS\n       ls\n") is None
    assert manpages.split_name_section("no sections at all") is None
    # groff's typographic dash is accepted too
    assert manpages.split_name_section("NAME\n       cp \u2010 copy files now\n")[1] == "copy files now"


def test_accept_rules() -> None:
    body = RENDERED + ("filler line\n" * 30)
    page = manpages.accept(body, "/x/ls.1.gz", max_chars=0)
    assert page is not None and not page.cut
    assert manpages.accept(body.replace("list directory\n       contents", "lists"), "/x", 0) is None
    assert manpages.accept(body.replace("list directory", "manual page for ls 1.0"), "/x", 0) is None
    cut = manpages.accept(body, "/x/ls.1.gz", max_chars=300)
    assert cut is not None and cut.cut and len(cut.text) <= 300 and cut.text.endswith("line")


def test_family_and_file_id() -> None:
    from pathlib import Path

    assert manpages.family(Path("gcloud_compute_ssl-policies_delete.1.gz")) == "gcloud"
    assert manpages.family(Path("git-commit.1.gz")) == "git"
    assert manpages.file_id_for("/usr/share/man/man1/ls.1.gz") == "man-ls.1"


PAGE = """<html><body><div class="body">
<table><thead><tr><th><p>Operation</p></th><th><p>Result</p></th></tr></thead>
<tbody><tr><td><code><span>x</span> <span>+</span> <span>y</span></code></td><td><p>sum of <em>x</em> and
<em>y</em></p></td></tr>
<tr><td>abs</td><td>(1)</td></tr></tbody></table>
<dl><dt class="sig sig-object py" id="os.path.join"><span class="sig-prename">os.path.</span>
<span class="sig-name">join</span>(<em>path</em>)<a class="headerlink" href="#">¶</a></dt></dl>
<dl><dt class="sig sig-object c" id="c.PyErr_Clear">void PyErr_Clear()</dt></dl>
<dl><dt class="sig sig-object std" id="opcode-NOP">NOP</dt></dl>
</div></body></html>"""


def test_parse_page_tables_and_definitions() -> None:
    tables, defs = htmldocs.parse_page(PAGE, "py-x.html")
    cells = tables[0]
    assert [(c.label, c.header, c.value) for c in cells] == [
        ("x + y", "Result", "sum of x and y"),
        ("abs", "Result", "(1)"),
    ]
    assert htmldocs.usable_cell(cells[0])
    assert not htmldocs.usable_cell(cells[1])  # "(1)" has one digit: a footnote mark, not an answer
    assert [(d.ident, squash(d.signature)) for d in defs] == [
        ("os.path.join", "os.path.join(path)"),
        ("PyErr_Clear", "voidpyerr_clear()"),
    ]


def test_report_renders_every_metric() -> None:
    s = summarise([_judged(["r"], {"r"}, answer="a", texts=["a"]), _judged([], set(), answerable=False)])
    from dataclasses import asdict

    result = {
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 1.0,
        "corpus": {
            "documents": 1,
            "knowledge_bases": {"kb": 1},
            "chunks": {"kb": 2},
            "queries": {"man/x": 2},
        },
        "systems": {"sys": {"description": "d", "refuses": True}},
        "summary": {"sys": {"man": asdict(s), "unanswerable": asdict(s), "unanswerable:mutated": asdict(s)}},
    }
    text = markdown(result)
    for column in ("R@1", "R@5", "R@10", "MRR", "nDCG@10", "answer in passage", "false refusals", "p95 ms"):
        assert column in text
    assert "refused: mutated" in text


# ---- candidate models: the pure helpers of the numpy reference encoder ---------------------------


def test_erf_approximation_is_within_its_bound() -> None:
    import numpy as np

    from benchmarks.quality.embedders import _erf

    xs = np.linspace(-4, 4, 161)
    # Abramowitz & Stegun 7.1.26: |error| <= 1.5e-7
    assert max(abs(float(_erf(np.array([x]))[0]) - math.erf(x)) for x in xs) < 2e-7


def test_read_safetensors_round_trip(tmp_path) -> None:
    import json as _json
    import struct

    import numpy as np

    from benchmarks.quality.embedders import read_safetensors

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([7, 8], dtype=np.int64)
    header = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
    }
    raw = _json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + a.tobytes() + b.tobytes())
    tensors = read_safetensors(path)
    assert set(tensors) == {"a", "b"}
    assert tensors["a"].tolist() == a.tolist() and tensors["b"].tolist() == [7, 8]


# ---- systems: fusion with stand-in legs (the /query_v2 reader: test_quality_v2.py) -----------------


def _v2_query():
    from benchmarks.quality.dataset import Query

    return Query("q1", "man", "description", "list directory contents", "agent_kb", ("f1",))


async def test_rrf_system_fuses_both_legs_and_adds_their_latency() -> None:
    from benchmarks.quality.systems import Outcome, Passage, RRFusion

    def p(fid: str) -> Passage:
        return Passage(fid, f"text {fid}", None, None, (fid, fid))

    class Leg:
        def __init__(self, files: list[str], ms: float, k: int = 3) -> None:
            self.files, self.ms, self.k = files, ms, k

        async def prepare(self) -> None:
            pass

        async def search(self, query) -> Outcome:
            return Outcome([p(f) for f in self.files], refused=False, latency_ms=self.ms)

    fused = RRFusion(Leg(["a", "b", "c"], 10.0), Leg(["c", "d", "a"], 2.0), k=3)  # type: ignore[arg-type]
    out = await fused.search(_v2_query())
    # a: 1/61 + 1/63; c: 1/63 + 1/61 (tie, a met first); b: 1/62; d: 1/62 (b met first)
    assert [x.file_id for x in out.passages] == ["a", "c", "b"]
    assert out.latency_ms >= 12.0
