"""The earned refusal, evidence shaping and the allow-list re-check."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from app.errors import BadRequest
from app.evidence.query.analysis import analyze_query
from app.evidence.query.evidence import build_evidence, display_page
from app.evidence.query.records import Fused
from app.evidence.query.refusal import SAFE_REFUSAL, _quoted_spans, decide_refusal, written_identifiers
from app.evidence.query.schemas import QueryV2Request, QueryV2Response, check_query_v2
from app.evidence.settings import RefusalSettings
from app.text import vocabulary
from tests.unit.v2.helpers import cand, fused

ROW = cand(
    "r1",
    "f1",
    "Sizes\nType: K 28\nLength (mm): 14",
    kind="table_row",
    entity_keys=frozenset({"k 28", "14 mm"}),
    page=3,
    page_label="12",
    section=("Dimensions",),
    table_caption="Sizes",
    row_label="K 28",
    headers=("Type", "Length (mm)"),
    row_values=("K 28", "14"),
    units=(None, "mm"),
    filename="manual.pdf",
    title="Manual",
)


def strong(candidate=ROW, channels=("exact", "lexical", "vector"), rerank: float = 0.9) -> Fused:
    return replace(fused(candidate, 0.8, channels), rerank=rerank)


def codes(decision) -> list[str]:
    return [r.code for r in decision.reasons]


def test_nothing_found_is_refused() -> None:
    decision = decide_refusal(analyze_query("anything"), [])
    assert decision.refuse and codes(decision) == ["no_candidates"]


def test_an_identifier_absent_from_every_candidate_is_refused_however_strong_the_rest() -> None:
    decision = decide_refusal(analyze_query("length of K 29"), [strong()])
    assert decision.refuse and codes(decision) == ["missing_identifier"]
    assert decision.reasons[0].value == "K 29"
    assert decision.as_debug()["reasons"] == [{"code": "missing_identifier", "value": "K 29"}]


def test_the_identifier_present_is_answered() -> None:
    decision = decide_refusal(analyze_query("length of K 28"), [strong()])
    assert not decision.refuse and decision.reasons == () and decision.signals == ()


@pytest.mark.parametrize(
    ("question", "code"),
    [
        ('what does "overload protection relay" mean', "missing_phrase"),
        ("is the length 15 mm", "missing_quantity"),
        ("does ISO 9001 apply", "missing_identifier"),
    ],
)
def test_other_distinctive_terms(question: str, code: str) -> None:
    assert codes(decide_refusal(analyze_query(question), [strong()])) == [code]


def test_quantity_found_by_entity_key_or_text() -> None:
    assert not decide_refusal(analyze_query("a length of 14 mm"), [strong()]).refuse  # entity key "14 mm"


# The mechanics below are checked under a fixed two-signal policy (the defaults are the benchmark's
# to choose; test_the_default_policy_is_the_benchmarks checks those).
TWO_SIGNALS = RefusalSettings(
    min_rerank_score=0.35,
    min_coverage=0.5,
    refuse_at=2.0,
    signals={
        "weak_rerank": 1.0,
        "no_agreement": 1.0,
        "rare_terms_missing": 1.0,
        "low_coverage": 0.5,
        "low_dense": 1.0,
    },
)


def test_the_default_policy_needs_a_signal_that_is_not_about_words() -> None:
    # every weight 0.5, refuse_at 1: two signals, one of them low_dense
    policy = RefusalSettings()
    assert (policy.refuse_at, policy.min_rerank_score, policy.min_coverage) == (1.0, 0.6, 0.5)
    assert policy.signals.low_coverage == 0.5  # coverage never refuses alone
    weak = decide_refusal(analyze_query("length type"), [strong(rerank=0.5)])
    assert not weak.refuse and [s.code for s in weak.signals] == ["weak_rerank"]
    # a lone channel and a weak score: a paraphrase looks like this (the lexical channel misses it)
    lonely = decide_refusal(analyze_query("length type"), [strong(channels=("vector",), rerank=0.5)])
    assert not lonely.refuse and [s.code for s in lonely.signals] == ["weak_rerank", "no_agreement"]
    far = decide_refusal(
        analyze_query("length type"), [strong(channels=("vector",), rerank=0.5)], best_dense=0.1
    )
    assert far.refuse and [s.code for s in far.signals] == ["weak_rerank", "no_agreement", "low_dense"]
    # "flange" and "gasket" are nowhere: coverage 1/3, alone answered
    off_topic = decide_refusal(analyze_query("flange gasket length"), [strong(rerank=0.9)])
    assert not off_topic.refuse and [s.code for s in off_topic.signals] == ["low_coverage"]
    # two lexical signals (weak rerank, low coverage) weigh 1 but are one kind of evidence: answered
    wordy = decide_refusal(analyze_query("flange gasket length"), [strong(rerank=0.5)])
    assert [s.code for s in wordy.signals] == ["weak_rerank", "low_coverage"] and not wordy.refuse
    # the vector channel finds nothing close in meaning either: refused
    dense = decide_refusal(analyze_query("flange gasket length"), [strong(rerank=0.9)], best_dense=0.1)
    assert dense.refuse and [s.code for s in dense.signals] == ["low_dense", "low_coverage"]
    assert dense.checked["best_dense"] == 0.1
    close = decide_refusal(analyze_query("flange gasket length"), [strong(rerank=0.9)], best_dense=0.6)
    assert not close.refuse
    item = strong(cand("w", "f1", "Mount the unit on a flat wall."), channels=("lexical", "vector"))
    paraphrase = decide_refusal(
        analyze_query("attach wall"), [item], document_frequency={"wall": 3}, documents=1000
    )
    assert [s.code for s in paraphrase.signals] == ["rare_terms_missing"] and not paraphrase.refuse


def test_terms_meet_their_inflections_in_english_and_german() -> None:
    # "returns"/"return", "files"/"file"; "Ventile"/"Ventil", "Dichtungen"/"Dichtung": coverage 1
    english = strong(cand("e", "f1", "return the file handle"), rerank=0.9)
    decision = decide_refusal(analyze_query("returns files"), [english])
    assert decision.checked["coverage"] == 1.0 and decision.signals == ()
    german = strong(cand("g", "f1", "ventil und dichtung prufen"), rerank=0.9)
    assert decide_refusal(analyze_query("Ventile Dichtungen"), [german]).checked["coverage"] == 1.0


def test_question_phrasing_and_contractions_are_no_terms() -> None:
    # how much / need / keep, wodurch / darf / viele, and "s" "don" "t" of contractions
    assert analyze_query("How much memory do I need to keep?").terms == ("memory",)
    assert analyze_query("Wodurch darf man wie viele Ventile tauschen?").terms == ("ventile", "tauschen")
    assert analyze_query("It's what the users don't see").terms == ("users", "see")


def test_coverage_is_the_best_of_the_first_few_candidates() -> None:
    # the first candidate holds none of the words, the third all of them: coverage 1, no signal
    other = [strong(cand(f"o{i}", "f1", "unrelated words here"), rerank=0.9) for i in range(2)]
    right = strong(cand("r", "f2", "gasket flange"), rerank=0.8)
    decision = decide_refusal(analyze_query("flange gasket"), [*other, right])
    assert decision.checked["coverage"] == 1.0
    # beyond coverage_depth (3) it does not count
    assert decide_refusal(analyze_query("flange gasket"), [*other, *other, right]).checked["coverage"] == 0.0


def test_the_pieces_of_an_identifier_are_not_words() -> None:
    # "ext4" is checked whole (found); its pieces "ext" and "4" are no coverage terms
    item = strong(cand("x", "f1", "format the disk as ext4 with mkfs"), rerank=0.9)
    decision = decide_refusal(analyze_query("format disk ext4"), [item])
    assert not decision.refuse and decision.checked["coverage"] == 1.0


def test_quoted_examples_are_the_questions_own_values() -> None:
    # 'report.pdf' and "[1, 2, {'a': 3}]" are the user's values, not names the documents must hold;
    # a quoted phrase of words is still a hard requirement, and so is an unquoted identifier
    item = strong(cand("m", "f1", "guess the type of a file from its suffix"), rerank=0.9)
    assert not decide_refusal(analyze_query("what MIME type does 'report.pdf' have?"), [item]).reasons
    assert not decide_refusal(
        analyze_query("turn the string \"[1, 2, {'a': 3}]\" into a list"), [item]
    ).reasons
    assert codes(decide_refusal(analyze_query('what does "unknown file suffix" mean'), [item])) == [
        "missing_phrase"
    ]
    assert codes(decide_refusal(analyze_query("what MIME type does report.pdf have?"), [item])) == [
        "missing_identifier"
    ]
    # contractions are no quotes: "don't ... they're" quotes nothing
    assert _quoted_spans("how don't the x.y values show as they're typed") == []


def test_a_hyphenated_german_compound_is_a_word_not_an_identifier() -> None:
    for question in ("Alte Windows-98-Rechner zeigen Umlaute falsch", "die Magic-SysRq-Tricks auslösen"):
        assert analyze_query(question).names == ()
    assert [e.raw for e in analyze_query("Typ K-28 und USB-C").names] == ["K-28", "USB-C"]


def test_a_written_name_the_visible_corpus_lacks_is_refused() -> None:
    # "NTFS" (acronym) and "Raspberry" (a capital inside an English sentence) occur in no visible chunk
    item = strong(cand("w", "f1", "mount the disk"), rerank=0.9)
    stats = {"document_frequency": {"mount": 5, "disk": 9}, "documents": 1000}
    acronym = decide_refusal(analyze_query("How do I mount an NTFS disk?"), [item], **stats)
    assert acronym.refuse and acronym.reasons[0].code == "missing_name" and acronym.reasons[0].value == "ntfs"
    proper = decide_refusal(analyze_query("Can I mount the disk on a Raspberry board?"), [item], **stats)
    assert [r.value for r in proper.reasons] == ["raspberry"]
    # a name the corpus holds somewhere (df > 0) is for the channels to find, not a refusal
    held = {"document_frequency": {"mount": 5, "disk": 9, "ntfs": 2}, "documents": 1000}
    assert not decide_refusal(analyze_query("How do I mount an NTFS disk?"), [item], **held).reasons
    # German capitalises every noun: a capital is no name there
    german = decide_refusal(analyze_query("Wie binde ich die Festplatte ein?"), [item], **stats)
    assert not german.reasons
    # a word introduced as a tool ("with", "mit") that nothing visible holds, in any inflection
    tool = decide_refusal(analyze_query("How do I mount the disk with udisksctl?"), [item], **stats)
    assert [r.value for r in tool.reasons] == ["udisksctl"]
    mit = decide_refusal(analyze_query("Wie hänge ich die Platte mit udisksctl ein?"), [item], **stats)
    assert [r.value for r in mit.reasons] == ["udisksctl"]
    # a German noun or an inflected word after "mit" is no tool name
    assert not decide_refusal(analyze_query("die Platte mit Tausendertrennzeichen"), [item], **stats).reasons
    assert not decide_refusal(analyze_query("ein Ordner mit zufälligem Namen"), [item], **stats).reasons
    # "mounting" has df 0 but a candidate holds "mount": an inflection, not a missing name
    assert not decide_refusal(analyze_query("help with mounting a disk"), [item], **stats).reasons


def test_soft_signals_need_company() -> None:
    # weak rerank (0.1 < 0.35) alone: one signal, answered
    weak = strong(rerank=0.1)
    one = decide_refusal(analyze_query("length type"), [weak], policy=TWO_SIGNALS)
    assert not one.refuse and [s.code for s in one.signals] == ["weak_rerank"]
    # weak rerank and no channel agreement: 2, but both follow from the words: answered
    lonely = strong(channels=("vector",), rerank=0.1)
    two = decide_refusal(analyze_query("length type"), [lonely], policy=TWO_SIGNALS)
    assert not two.refuse and [s.code for s in two.signals] == ["weak_rerank", "no_agreement"]
    # weak rerank and a low dense similarity: 2, refused
    dense = decide_refusal(analyze_query("length type"), [weak], policy=TWO_SIGNALS, best_dense=0.0)
    assert dense.refuse and [s.code for s in dense.signals] == ["weak_rerank", "low_dense"]
    # with one channel left (a degraded search) agreement is not judged
    assert [
        s.code
        for s in decide_refusal(
            analyze_query("length type"), [lonely], channels_run=1, policy=TWO_SIGNALS
        ).signals
    ] == ["weak_rerank"]
    # the threshold is configurable
    assert not decide_refusal(analyze_query("length type"), [lonely], RefusalSettings(refuse_at=2.5)).refuse


def test_rare_terms_and_coverage() -> None:
    # corpus of 1,000 chunks: "zylinderkopf" in none (rare: 0 <= 0.01 * 1000), "length" in 400 (not
    # rare: 400 > 10): the rare term is missing from every candidate;
    # coverage of the best candidate: "length" yes, "zylinderkopf" no -> 1/2 = 0.5, not under 0.5
    query = analyze_query("zylinderkopf length")
    item = strong(channels=("vector",), rerank=0.9)
    decision = decide_refusal(
        query, [item], document_frequency={"length": 400}, documents=1000, policy=TWO_SIGNALS
    )
    assert [s.code for s in decision.signals] == ["no_agreement", "rare_terms_missing"]
    assert not decision.refuse  # 2, but about the words only
    assert decision.checked["rare_terms"] == ["zylinderkopf"] and decision.checked["coverage"] == 0.5
    # without corpus statistics: coverage 1/3 < 0.5 weighs 0.5; with no agreement 1.5 < 2, answered
    low = decide_refusal(analyze_query("flange gasket length"), [item], policy=TWO_SIGNALS)
    assert [s.code for s in low.signals] == ["no_agreement", "low_coverage"] and not low.refuse
    assert low.checked["signal_weight"] == 1.5
    # a weak reranker score on top: 2.5, still about the words; with the dense channel agreeing
    # that nothing is close (0.1 < 0.25), refused
    weak = decide_refusal(
        analyze_query("flange gasket length"), [replace(item, rerank=0.2)], policy=TWO_SIGNALS
    )
    assert [s.code for s in weak.signals] == ["weak_rerank", "no_agreement", "low_coverage"]
    assert not weak.refuse
    far = decide_refusal(analyze_query("flange gasket length"), [item], policy=TWO_SIGNALS, best_dense=0.1)
    assert [s.code for s in far.signals] == ["no_agreement", "low_dense", "low_coverage"] and far.refuse


def test_rare_is_a_share_of_the_corpus() -> None:
    # 1,000 chunks, rare_share 0.01: df 10 is rare (10 <= 10), df 11 is not
    query = analyze_query("gamma delta")
    item = strong(cand("z", "f1", "nothing relevant"))
    ten = decide_refusal(query, [item], document_frequency={"gamma": 10, "delta": 11}, documents=1000)
    assert ten.checked["rare_terms"] == ["gamma"]


def test_missing_words_alone_never_refuse() -> None:
    # a paraphrase: "attach" and "device" occur nowhere in the corpus (rare, missing) and cover 1/3,
    # but the channels agree and the reranker is confident: 1 + 0.5 = 1.5 < 2, answered
    query = analyze_query("attach device wall")
    item = strong(cand("w", "f1", "Mount the unit on a flat wall."), channels=("lexical", "vector"))
    decision = decide_refusal(
        query, [item], document_frequency={"wall": 3}, documents=1000, policy=TWO_SIGNALS
    )
    assert [s.code for s in decision.signals] == ["rare_terms_missing", "low_coverage"]
    assert not decision.refuse


def test_the_safe_refusal_is_one_fixed_english_sentence() -> None:
    assert SAFE_REFUSAL.endswith(".") and "documents" in SAFE_REFUSAL


# --- evidence ---------------------------------------------------------------------------------


def test_evidence_shape_follows_the_contract() -> None:
    items = [strong(rerank=1.7), fused(cand("p1", "f2", "Prose text", page=1), 0.42, ("lexical",))]
    results = build_evidence(items, ["f1", "f2"], k=8)
    first = results[0].model_dump()
    contract_keys = {
        "citation_id", "file_id", "filename", "title", "content", "page", "section", "chunk_kind",
        "table_title", "row_label", "headers", "row_values", "units", "footnotes", "source_type",
        "channels", "score", "language", "publication_date", "metadata",
    }  # fmt: skip
    assert contract_keys <= set(first)
    assert first["citation_id"] == "V2-1" and results[1].citation_id == "V2-2"
    assert first["chunk_kind"] == "table_row" and first["table_title"] == "Sizes"
    # the page in the file (what a viewer shows), the printed label beside it
    assert first["page"] == 3 and first["page_label"] == "12"
    assert first["metadata"]["physical_page"] == 3 and first["metadata"]["chunk_id"] == "r1"
    assert first["score"] == 1.0  # clipped to 0..1
    assert first["channels"] == ["exact", "lexical", "vector"]
    assert first["units"] == [None, "mm"] and first["section"] == ["Dimensions"]
    assert results[1].score == pytest.approx(0.42) and results[1].chunk_kind == "prose"
    response = QueryV2Response(index_version="v2-1", results=results).model_dump(exclude_none=True)
    assert response["route"] == "v2" and response["degraded"] is False and "debug" not in response


@pytest.mark.parametrize(
    ("page", "shown"),
    [(3, 3), (1, 1), (438, 438), (None, None), (0, None)],
)
def test_display_page(page: int | None, shown: int | None) -> None:
    assert display_page(page) == shown


def test_a_foreign_file_never_becomes_evidence() -> None:
    foreign = fused(cand("x", "intruder", "K 28 secret"), 0.99)
    own = fused(cand("y", "f1", "own text"), 0.5)
    results = build_evidence([foreign, own], ["f1"], k=5)
    assert [r.file_id for r in results] == ["f1"] and results[0].citation_id == "V2-1"
    assert build_evidence([foreign], ["f1"], k=5) == []


def test_k_bounds_the_results() -> None:
    items = [fused(cand(f"c{i}", "f1"), 0.5) for i in range(12)]
    assert len(build_evidence(items, ["f1"], k=3)) == 3


# --- request checks ---------------------------------------------------------------------------


def request(**fields) -> QueryV2Request:
    return QueryV2Request(**{"query": "q", "file_ids": ["a"], **fields})


def test_request_checks_dedupe_and_bounds() -> None:
    assert check_query_v2(request(file_ids=["a", "b", "a"])).file_ids == ["a", "b"]
    # 1,000 distinct ids pass even when repeated; 1,001 do not
    assert len(check_query_v2(request(file_ids=[str(i) for i in range(1000)] * 2)).file_ids) == 1000
    cases = {
        "file_ids must not be empty": request(file_ids=[]),
        "At most 1000 file_ids are allowed (1001 given); send at most 1000 per request": request(
            file_ids=[str(i) for i in range(1001)]
        ),
        "query must not be empty": request(query="  "),
        "query must be at most 4000 characters": request(query="x" * 4001),
        "each file id must be 1 to 200 characters": request(file_ids=["x" * 201]),
        "k must be between 1 and 10": request(k=11),
    }
    for detail, bad in cases.items():
        with pytest.raises(BadRequest) as caught:
            check_query_v2(bad)
        assert caught.value.detail == detail
    assert check_query_v2(request(k=1, query="x" * 4000)).k == 1
    # NUL and lone surrogates never get this far: the wire model refuses them (422 at the edge)
    for bad in ({"query": "a\x00b"}, {"file_ids": ["a\udc80"]}, {"entity_id": "agent_\x00"}):
        with pytest.raises(ValidationError, match=r"string_unsafe|string_unicode"):
            request(**bad)


def test_a_qualified_name_is_found_in_its_shortened_form_and_a_mutated_option_is_not() -> None:
    from app.evidence.query.analysis import analyze_query as analyze
    from app.evidence.query.records import Candidate
    from app.text.normalize import normalize

    def item(text: str) -> Fused:
        c = Candidate(chunk_id=text, file_id="f", content=text, search_text=normalize(text))
        return Fused(candidate=c, score=0.9, channels=("lexical", "vector"), ranks={"lexical": 1})

    doc = [item("PurePath.as_uri() Represent the path as a file URI. Use --log-http to trace requests.")]
    assert not decide_refusal(analyze("pathlib.PurePath.as_uri"), doc).refuse
    assert not decide_refusal(analyze("--log-http"), doc).refuse
    refused = decide_refusal(analyze("--log-htp"), doc)
    assert refused.refuse and refused.reasons[0].code == "missing_identifier"


def test_a_member_written_alone_under_its_owner_is_found() -> None:
    def item(text: str, section: tuple[str, ...]) -> Fused:
        c = cand(text, "f", text, section=section)
        return Fused(candidate=c, score=0.9, channels=("lexical", "vector"), ranks={"lexical": 1})

    doc = [item("popitem() Return an arbitrary (key, message) pair.", ("Mailbox objects",))]
    assert not decide_refusal(analyze_query("mailbox.Mailbox.popitem"), doc).refuse
    # the owner named nowhere, or the member misspelt: not found
    for name in ("mailbox.Maildir.popitem", "mailbox.Mailbox.popitme"):
        decision = decide_refusal(analyze_query(name), doc)
        assert decision.refuse and decision.reasons[0].code == "missing_identifier", name


def test_a_word_no_dictionary_knows_and_nothing_visible_holds_is_a_missing_name() -> None:
    item = strong(cand("w", "f1", "the firewall drops incoming traffic"), rerank=0.9)
    stats = {"document_frequency": {"firewall": 4, "traffic": 9, "incoming": 3}, "documents": 1000}
    # "nftables" (after "use") is in no English or German word list and in no visible chunk
    nft_q = "How do I use nftables rules for incoming traffic?"
    nft = decide_refusal(analyze_query(nft_q), [item], **stats)
    assert nft.refuse and [r.value for r in nft.reasons] == ["nftables"]
    # a German question: lower-case unknown words only (its nouns and compounds are capitalised)
    de_q = "Wie öffne ich für die Akkulaufzeit mit firewalld einen Port?"
    de = decide_refusal(analyze_query(de_q), [item], **stats)
    assert [r.value for r in de.reasons] == ["firewalld"]
    # the question's own example in quotes is not a name of the documents
    quoted_q = "User typed 'appel': which traffic word is nearest?"
    quoted = decide_refusal(analyze_query(quoted_q), [item], **stats)
    assert not quoted.reasons
    # an unknown word a visible chunk holds is for the channels to find, not a refusal
    held_df = {**stats["document_frequency"], "nftables": 1, "ruleset": 2}  # type: ignore[dict-item]
    assert not decide_refusal(
        analyze_query(nft_q), [item], document_frequency=held_df, documents=1000
    ).reasons
    # an unknown word built of words, or shortened from one, is no name: people write "repo",
    # "misdetected" or "virtualenv" in answerable questions
    assert not decide_refusal(analyze_query("Which traffic does my repo drop?"), [item], **stats).reasons
    assert not decide_refusal(
        analyze_query("Is traffic dropped inside a virtualenv?"), [item], **stats
    ).reasons
    # every word known: nothing to refuse on
    assert not decide_refusal(analyze_query("Which traffic does the firewall drop?"), [item], **stats).reasons


def test_a_word_built_of_no_known_words_is_a_name_wherever_it_stands() -> None:
    item = strong(cand("w", "f1", "the graphics card lists its columns"), rerank=0.9)
    stats = {"document_frequency": {"graphics": 4, "card": 9, "columns": 3}, "documents": 1000}
    # "lsgpu" and "httpx" follow no introducer, are in no word list and are not built of known words
    gpu = decide_refusal(analyze_query("Which columns does lsgpu show for a graphics card?"), [item], **stats)
    assert gpu.refuse and [r.value for r in gpu.reasons] == ["lsgpu"]
    de = decide_refusal(analyze_query("Welche Spalten zeigt lsgpu für die Grafikkarte?"), [item], **stats)
    assert [r.value for r in de.reasons] == ["lsgpu"]
    # words, inflections, compounds, prefixes and abbreviations are words, however rare
    for question in (
        "Which columns are in my subfolders' graphics card list?",
        "The graphics card was preinstalled and misdetected: which columns?",
        "Welche Spalten sind weggeflogen, als die Grafikkarte weiterläuft?",
        "Which columns does my repo list inside a virtualenv?",
        "Which codepage do the graphics card columns use?",
    ):
        assert not decide_refusal(analyze_query(question), [item], **stats).reasons, question


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("lsgpu", False),
        ("httpx", False),
        ("uvloop", False),
        ("pyperformance", False),
        ("subfolders", True),
        ("preinstalled", True),
        ("codepage", True),
        ("virtualenv", True),
        ("repo", True),
        ("weggeflogen", True),
        ("drübergeschrieben", True),
        ("disassembliere", True),
    ],
)
def test_wordlike(word: str, expected: bool) -> None:
    assert vocabulary.wordlike(word) is expected


def test_paths_options_with_values_and_german_lower_case_compounds_are_names() -> None:
    found = [w for w, _ in written_identifiers("Was steht in /etc/apt/apt-mark.conf und ~/.config/x?", "de")]
    assert found == ["/etc/apt/apt-mark.conf", "~/.config/x"]
    assert written_identifiers("Sortiert ls --sort=owner nach Besitzer?", "de") == [
        ("--sort=owner", ("--sort", "owner"))
    ]
    # German writes its compounds with capitals: a lower-case hyphenated word is a command
    assert [w for w, _ in written_identifiers("mit systemctl hibernate-at planen", "de")] == ["hibernate-at"]
    assert written_identifiers("Alte Windows-98-Rechner und Magic-SysRq-Tricks", "de") == []
    # English writes ordinary words with hyphens ("built-in", "read-only"); quoted examples are values
    assert written_identifiers("Is the built-in read-only mode on?", "en") == []
    assert written_identifiers("Why does 'a/b/c' fail?", "en") == []
    assert written_identifiers("one /tmp file", "en") == []  # one part: a directory, not a path


def test_a_written_path_or_option_value_no_candidate_holds_is_refused() -> None:
    listed = strong(cand("o", "f1", "--sort=WORD sort by WORD: none, size, time, version"), rerank=0.9)
    conf = strong(cand("c", "f1", "Settings live in /etc/apt/apt.conf and /etc/apt/apt.conf.d"), rerank=0.9)
    items = [listed, conf]
    # the value listed apart from its option, in one candidate: found
    assert not decide_refusal(analyze_query("Sorts ls --sort=size by file size?"), items).reasons
    owner = decide_refusal(analyze_query("Sorts ls --sort=owner by owner?"), items)
    assert owner.refuse and [r.value for r in owner.reasons] == ["--sort=owner"]
    assert not decide_refusal(analyze_query("What is set in /etc/apt/apt.conf?"), items).reasons
    path = decide_refusal(analyze_query("What is set in /etc/apt/apt-mark.conf?"), items)
    assert path.refuse and [r.value for r in path.reasons] == ["/etc/apt/apt-mark.conf"]
    hyphen = decide_refusal(analyze_query("Wie plane ich mit sort hibernate-at?"), items)
    assert [r.value for r in hyphen.reasons] == ["hibernate-at"]
