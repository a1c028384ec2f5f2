"""The natural-question checker on a tiny hand-made corpus pair (one HTML page, one man page's text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.progress import Progress
from benchmarks.quality import manpages
from benchmarks.quality.natural import bench, check, sets
from benchmarks.quality.natural.text import (
    TextCache,
    collapse,
    content_word_ratio,
    content_words,
    html_text,
)

PAGE = """<html><head><title>Harbour</title><style>.x { color: red }</style>
<script>var tideTable = "secret";</script></head><body>
<h1>Harbour tools<a class="headerlink" href="#">¶</a></h1>
<section><h2>Tide tables</h2>
<p>The function <code>harbour.tides()</code> returns the high and low water times for a port,
in local time.</p>
<table><thead><tr><th>Boat</th><th>Length</th></tr></thead>
<tbody><tr><td>Skiff</td><td>4.2 metres of larch</td></tr>
<tr><td>Trawler</td><td>18 metres with a steel hull</td></tr></tbody></table>
</section><section><h2>Mooring</h2><p>Every boat is moored with two lines and a fender.</p></section>
</body></html>"""

MAN_TEXT = """NETMEND(1)                  User Commands                  NETMEND(1)

NAME
       netmend - repair torn fishing nets from a pattern file

OPTIONS
       --knots=N
              retie at most N knots before stopping
"""


def _item(corpus: str, n: int, kind: str, question: str, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": f"{corpus}-{n:03d}",
        "corpus": corpus,
        "lang": "en",
        "kind": kind,
        "split": "dev",
        "question": question,
        "gold_files": [],
        "gold_location": {"section": None, "table_row": None},
        "answer": None,
        "evidence": None,
        "absent_terms": [],
        "note": "",
    }
    item.update(extra)
    return item


def _gold(path: str, section: str, answer: str, evidence: str, row: str | None = None) -> dict[str, Any]:
    return {
        "gold_files": [path],
        "gold_location": {"section": section, "table_row": row},
        "answer": answer,
        "evidence": evidence,
    }


GOOD_HTML = [
    _item(
        "tiny-html",
        1,
        "paraphrase",
        "When is the sea at its highest near a quay?",
        **_gold(
            "tools/harbour.html",
            "Tide tables",
            "returns the high and low water times for a port",
            "harbour.tides() returns the high and low water times for a port, in local time.",
        ),
    ),
    _item(
        "tiny-html",
        2,
        "table",
        "How long is a skiff?",
        **_gold(
            "tools/harbour.html", "Tide tables", "4.2 metres of larch", "Skiff 4.2 metres of larch", "Skiff"
        ),
    ),
    _item(
        "tiny-html",
        3,
        "identifier",
        "What does harbour.tides() return?",
        **_gold(
            "tools/harbour.html",
            "Tide tables",
            "high and low water times",
            "returns the high and low water times",
        ),
    ),
    _item(
        "tiny-html",
        4,
        "unanswerable-named",
        "What does harbour.currents() return?",
        absent_terms=["harbour.currents"],
    ),
    _item(
        "tiny-html",
        5,
        "unanswerable-topic",
        "How deep is the harbour?",
        absent_terms=["depth"],
    ),
]
GOOD_MAN = [
    _item(
        "tiny-man",
        1,
        "identifier",
        "What does --knots limit?",
        **_gold(
            "man1/netmend.1.gz",
            "OPTIONS",
            "retie at most N knots",
            "--knots=N retie at most N knots before stopping",
        ),
    )
]


def _write_set(
    folder: Path, name: str, root: Path, render: str, files: list[str], items: list[dict[str, Any]]
) -> None:
    spec = {
        "name": name,
        "language": "en",
        "package": "tiny-doc",
        "root": str(root),
        "render": render,
        "files": files,
    }
    (folder / f"{name}.corpus.json").write_text(json.dumps(spec))
    (folder / f"{name}.questions.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two corpora in tmp_path: tiny-html (one page) and tiny-man (a text standing in for man's output)."""
    docs = tmp_path / "docs"
    (docs / "tools").mkdir(parents=True)
    (docs / "tools" / "harbour.html").write_text(PAGE)
    (docs / "man1").mkdir()
    (docs / "man1" / "netmend.1.gz").write_text(MAN_TEXT)
    # no man(1) in a unit test: the "page" is already its rendering
    monkeypatch.setattr(manpages, "render", lambda path, timeout_s=60.0: Path(path).read_text())
    monkeypatch.setattr(manpages, "is_redirect", lambda path: False)
    sets_dir = tmp_path / "sets"
    sets_dir.mkdir()
    _write_set(sets_dir, "tiny-html", docs, "html", ["tools/harbour.html"], GOOD_HTML)
    _write_set(sets_dir, "tiny-man", docs, "man", ["man1/netmend.1.gz"], GOOD_MAN)
    return sets_dir


def _check(folder: Path, name: str) -> check.CorpusReport:
    return check.check_corpus(name, folder, TextCache(folder.parent / "cache"))


def _failures(report: check.CorpusReport) -> list[str]:
    return [str(p) for p in report.failures]


def test_visible_text_drops_scripts_styles_and_pilcrows_and_separates_blocks() -> None:
    text = collapse(html_text(PAGE))
    assert "secret" not in text and "color" not in text and "¶" not in text
    # inline <code> joins its sentence; table cells are separate words
    assert "The function harbour.tides() returns the high" in text
    assert "Skiff 4.2 metres of larch Trawler" in text


def test_good_items_pass(folder: Path) -> None:
    for name, n in (("tiny-html", 5), ("tiny-man", 1)):
        report = _check(folder, name)
        assert _failures(report) == []
        assert len(report.items) == n
    report = _check(folder, "tiny-html")
    assert report.counts("kind") == {
        "paraphrase": 1,
        "table": 1,
        "identifier": 1,
        "unanswerable-named": 1,
        "unanswerable-topic": 1,
    }
    assert set(report.ratio_by_id) == {"tiny-html-001"}


def test_content_word_ratio_arithmetic() -> None:
    # content words of the question: sea, highest, near, quay (when, is, the, at, its: too short or
    # stopwords); the evidence has none of them -> 0/4
    q = "When is the sea at its highest near a quay?"
    assert content_words(q, "en") == ["sea", "highest", "near", "quay"]
    assert content_word_ratio(q, "the high and low water times", "en") == 0.0
    # "What water times does harbour.tides() list for a port?": water, times, harbour.tides, list,
    # port; the evidence has water, times, harbour.tides, port -> 4/5 = 0.8
    evidence = "harbour.tides() returns the high and low water times for a port"
    assert content_word_ratio("What water times does harbour.tides() list for a port?", evidence, "en") == 0.8
    # German stopwords wie, kann, ich, die, des -> content words Gezeiten, Hafens, sehen
    assert content_words("Wie kann ich die Gezeiten des Hafens sehen?", "de") == [
        "gezeiten",
        "hafens",
        "sehen",
    ]


def test_every_bad_item_is_reported(folder: Path) -> None:
    bad = [
        *GOOD_HTML,
        # answer not verbatim (the page says "4.2 metres of larch")
        _item(
            "tiny-html",
            6,
            "table",
            "How long is a skiff?",
            **_gold(
                "tools/harbour.html",
                "Tide tables",
                "4.2 meters of larch",
                "Skiff 4.2 meters of larch",
                "Skiff",
            ),
        ),
        # the absent term is on the page (in another case)
        _item("tiny-html", 7, "unanswerable-named", "What is a Fender?", absent_terms=["FENDER"]),
        # paraphrase sharing 4 of 5 content words with the evidence
        _item(
            "tiny-html",
            8,
            "paraphrase",
            "What water times does harbour.tides() list for a port?",
            **_gold(
                "tools/harbour.html",
                "Tide tables",
                "high and low water times",
                "harbour.tides() returns the high and low water times for a port",
            ),
        ),
        # the same id as the first item
        _item("tiny-html", 1, "unanswerable-topic", "Who built the harbour?", absent_terms=["architect"]),
        # a gold file outside the corpus, a bad enum, an answer outside its evidence
        _item(
            "tiny-html",
            9,
            "section",
            "How are boats moored?",
            split="train",
            **_gold("tools/other.html", "Mooring", "two lines", "Every boat is moored"),
        ),
    ]
    (folder / "tiny-html.questions.jsonl").write_text("".join(json.dumps(i) + "\n" for i in bad))
    failures = _failures(_check(folder, "tiny-html"))
    joined = "\n".join(failures)
    assert any(f.startswith("tiny-html-006") and "answer not found verbatim" in f for f in failures), joined
    assert any(f.startswith("tiny-html-006") and "evidence not found verbatim" in f for f in failures), joined
    assert any(
        f.startswith("tiny-html-007") and "'FENDER' occurs in tools/harbour.html" in f for f in failures
    )
    assert any(
        f.startswith("tiny-html-008") and "shares 0.80" in f and "water, times, harbour.tides, port" in f
        for f in failures
    ), joined
    assert any(
        f.startswith("tiny-html-001 (line 9)") and "id used twice (first on line 1)" in f for f in failures
    )
    nine = [f for f in failures if f.startswith("tiny-html-009")]
    assert any("split must be one of dev, test" in f for f in nine), joined
    assert any("not in tiny-html.corpus.json: tools/other.html" in f for f in nine), joined
    assert any("answer is not inside evidence" in f for f in nine), joined
    assert check.main(["--folder", str(folder), "--cache", str(folder.parent / "cache"), "tiny-html"]) == 1


def test_spacing_and_case_hints(folder: Path) -> None:
    items = [
        _item(
            "tiny-man",
            1,
            "identifier",
            "What does --knots limit?",
            **_gold("man1/netmend.1.gz", "OPTIONS", "Retie at most", "retie at most N knots"),
        ),
        _item(
            "tiny-man",
            2,
            "identifier",
            "What does --knots limit?",
            **_gold("man1/netmend.1.gz", "OPTIONS", "retieat most N", "retieat most N knots"),
        ),
    ]
    (folder / "tiny-man.questions.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    failures = _failures(_check(folder, "tiny-man"))
    assert any(f.startswith("tiny-man-001") and "different case" in f for f in failures), failures
    assert any(f.startswith("tiny-man-002") and "different spacing" in f for f in failures), failures


def test_missing_package_prints_install_hint(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_set(folder, "gone", tmp_path / "nowhere", "html", ["a.html"], [])
    code = check.main(["--folder", str(folder), "--cache", str(tmp_path / "cache"), "gone"])
    out = capsys.readouterr().out
    assert code == 1
    assert "apt-get update && apt-get install -y tiny-doc" in out


def test_write_stores_ratio_in_stable_key_order(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = folder / "tiny-html.questions.jsonl"
    # a stale ratio on a non-paraphrase item is dropped; keys come back in the spec's order
    lines = path.read_text().splitlines()
    table = json.loads(lines[1])
    lines[1] = json.dumps({"content_word_ratio": 0.3, **dict(reversed(list(table.items())))})
    path.write_text("\n".join(lines) + "\n")
    args = ["--folder", str(folder), "--cache", str(folder.parent / "cache"), "--write", "tiny-html"]
    assert check.main(args) == 0
    written = [json.loads(x) for x in path.read_text().splitlines()]
    assert written[0]["content_word_ratio"] == 0.0
    assert "content_word_ratio" not in written[1]
    assert list(written[1]) == [k for k in sets.FIELDS if k in written[1]]
    assert list(written[0])[-1] == "content_word_ratio"
    before = path.read_text()
    assert check.main(args) == 0
    assert path.read_text() == before  # a second --write changes nothing
    out = capsys.readouterr().out
    assert "items: 5 (needed >= 300): not met" in out
    assert "per id: 001=0.00" in out  # each paraphrase's ratio, by the number of its id
    assert check.main([*args, "--strict"]) == 1


def test_run_builds_one_knowledge_base_per_corpus_without_failing_items(folder: Path) -> None:
    path = folder / "tiny-html.questions.jsonl"
    broken = _item("tiny-html", 6, "unanswerable-named", "What is a fender?", absent_terms=["fender"])
    path.write_text(path.read_text() + json.dumps(broken) + "\n")
    opts = bench.Options(split="dev", folder=folder, out_dir=folder.parent / "results")
    corpus, items, facts = bench.build(opts, Progress())
    assert corpus.kbs() == {
        "agent_nat_tiny_html": ["tiny-html:tools/harbour.html"],
        "agent_nat_tiny_man": ["tiny-man:man1/netmend.1.gz"],
    }
    html, man = corpus.documents
    assert (html.filename, html.content_type, html.path) == (
        "tools-harbour.html",
        "text/html",
        str(folder.parent / "docs" / "tools" / "harbour.html"),
    )
    # a man page is uploaded as its rendering, a text file
    assert (man.filename, man.content_type) == ("netmend.1.txt", "text/plain")
    assert Path(man.path).read_text() == MAN_TEXT
    # the item whose absent term is on the page is left out, and counted
    assert facts["tiny-html"] == {
        "kb": "agent_nat_tiny_html",
        "files": 1,
        "corpus_files": 1,
        "questions": 5,
        "excluded": 1,
        "failures": 1,
    }
    assert [q.qid for q in corpus.queries] == [i["id"] for i in items]
    table = next(q for q in corpus.queries if q.kind == "table")
    assert table.relevant == ("tiny-html:tools/harbour.html",) and table.answer == "4.2 metres of larch"
    named = next(q for q in corpus.queries if q.kind == "unanswerable-named")
    assert not named.answerable and named.relevant == () and named.answer is None
    # no question of the split: the run says so instead of measuring nothing
    with pytest.raises(bench.SetupError, match="no question of split 'test'"):
        bench.build(bench.Options(split="test", folder=folder, out_dir=folder.parent / "results"), Progress())
