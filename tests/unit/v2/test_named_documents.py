"""A document named in a question selects the document, not its first chunks
(app/evidence/query/named_documents.py), and what `rank` makes of it. Pure."""

from __future__ import annotations

from app.evidence.query.analysis import analyze_query
from app.evidence.query.named_documents import asked_beside_name, select_named_documents
from app.evidence.query.ranking import rank
from app.evidence.query.records import Scored
from app.evidence.query.rerank import FeatureReranker
from app.evidence.query.statistics import Statistics
from app.evidence.settings import ChannelSettings, FusionSettings, V2Settings
from tests.unit.v2.helpers import cand

DOCUMENT = {"title": "Nightly Backup Server Guide", "filename": "backup-guide.md"}
GUIDE = {"file_id": "guide", **DOCUMENT}
COVER = cand("cover", content="Nightly Backup Server Guide. Version 2. Read this first.", page=1, **GUIDE)
INTRO = cand("intro", content="Backups keep copies of your work on a second disk.", page=1, **GUIDE)
RESTORE = cand(
    "restore", content="To restore one file, open the archive list and pick the file.", page=7, **GUIDE
)
ELSEWHERE = cand(
    "elsewhere", "notes", "Restore a file from the recycle bin with a right click.", title="Desk notes"
)
LABEL = cand(
    "label", "guide", "Restore | bring a file back", kind="table_row", row_label="Restore", **DOCUMENT
)


def title_hits() -> list[Scored]:
    """What the exact channel returns for a title match: the document's first chunks at 0.7."""
    return [Scored(COVER, 0.7, "title"), Scored(INTRO, 0.7, "title")]


def lists(exact: list[Scored] | None = None) -> dict[str, list[Scored]]:
    return {
        "exact": title_hits() if exact is None else exact,
        "lexical": [Scored(ELSEWHERE, 6.0, "bm25"), Scored(RESTORE, 5.5, "bm25"), Scored(COVER, 2.0, "bm25")],
        "vector": [Scored(ELSEWHERE, 0.62), Scored(RESTORE, 0.6), Scored(INTRO, 0.4)],
    }


def exact_ids(out: dict[str, list[Scored]]) -> list[str]:
    return [hit.candidate.chunk_id for hit in out["exact"]]


def test_a_question_asking_in_a_named_document_moves_the_match_onto_the_chunk_that_answers() -> None:
    analysis = analyze_query("How do I restore one file with the Backup Guide?")
    out = select_named_documents(lists(), analysis, 3)
    assert exact_ids(out) == ["restore"]
    assert out["exact"][0].score == 0.7 and out["exact"][0].detail == "title"
    # the content channels' lists are as they were
    assert out["lexical"] == lists()["lexical"] and out["vector"] == lists()["vector"]


def test_only_the_name_or_words_asking_for_a_document_keep_the_first_chunks() -> None:
    for question in ("Backup Guide", "Which manual is the backup guide?", "Backup-Guide Handbuch"):
        out = select_named_documents(lists(), analyze_query(question), 3)
        assert exact_ids(out) == ["cover", "intro"], question


def test_no_found_chunk_of_the_document_holding_the_rest_keeps_the_first_chunks() -> None:
    # "upgrade" is nowhere in the guide's chunks the channels found
    out = select_named_documents(lists(), analyze_query("How do I upgrade the Backup Guide?"), 3)
    assert exact_ids(out) == ["cover", "intro"]
    # and a chunk of another document holding it does not take the guide's match
    only_elsewhere = {**lists(), "lexical": [Scored(ELSEWHERE, 6.0)], "vector": [Scored(ELSEWHERE, 0.6)]}
    out = select_named_documents(only_elsewhere, analyze_query("restore a file, Backup Guide"), 3)
    assert exact_ids(out) == ["cover", "intro"]


def test_the_match_takes_at_most_chunks_of_the_document_best_first_and_zero_is_off() -> None:
    both = {**lists(), "vector": [Scored(RESTORE, 0.6), Scored(COVER, 0.5), Scored(INTRO, 0.45)]}
    analysis = analyze_query("backup guide: restore a file from the archive, version 2")
    assert exact_ids(select_named_documents(both, analysis, 3)) == ["restore", "cover"]
    assert exact_ids(select_named_documents(both, analysis, 1)) == ["restore"]
    assert exact_ids(select_named_documents(both, analysis, 0)) == ["cover", "intro"]


def test_a_label_or_entity_match_stays_and_keeps_the_better_weight() -> None:
    exact = [Scored(LABEL, 1.0, "row_label"), *title_hits()]
    with_label = {**lists(exact), "lexical": [Scored(LABEL, 7.0), *lists()["lexical"]]}
    out = select_named_documents(with_label, analyze_query("Backup Guide: restore"), 3)
    assert [(h.candidate.chunk_id, h.score, h.detail) for h in out["exact"]] == [
        ("label", 1.0, "row_label"),
        ("restore", 0.7, "title"),
    ]


def test_a_file_name_match_counts_as_naming_the_document() -> None:
    exact = [Scored(COVER, 0.6, "filename"), Scored(INTRO, 0.6, "filename")]
    out = select_named_documents(lists(exact), analyze_query("restore one file backup-guide"), 3)
    assert exact_ids(out) == ["restore"]
    # an entity hit that says "document_number" may be a passing mention: it is never moved
    numbers = [Scored(COVER, 0.85, "document_number")]
    assert exact_ids(select_named_documents(lists(numbers), analyze_query("BG-2 restore"), 3)) == ["cover"]


def test_the_terms_beside_the_name_are_by_stems_and_leave_out_document_words() -> None:
    assert asked_beside_name(analyze_query("restoring files in the backup guides manual"), COVER) == (
        "restoring",
        "files",
    )
    assert asked_beside_name(analyze_query("Nightly backup server: Handbuch"), COVER) == ()


async def test_rank_puts_the_answering_section_of_the_named_document_first() -> None:
    analysis = analyze_query("How do I restore one file with the Nightly Backup Server Guide?")
    tuning = V2Settings(fusion=FusionSettings(per_file_cap=10, per_page_cap=10))
    off = tuning.model_copy(update={"channels": ChannelSettings(named_document_chunks=0)})
    reranker = FeatureReranker(tuning.rerank.features)
    served = await rank(analysis, lists(), Statistics(), tuning, reranker)
    before = await rank(analysis, lists(), Statistics(), off, reranker)
    assert served.items[0].candidate.chunk_id == "restore"
    assert before.items[0].candidate.chunk_id != "restore"


def test_an_identifier_that_is_part_of_the_documents_name_names_it() -> None:
    coded = {"file_id": "guide", "title": "NB-7 Nightly Backup Server Guide", "filename": "nb7.pdf"}
    cover = cand(
        "cover", content="NB-7 Nightly Backup Server Guide", entity_keys=frozenset({"nb 7"}), **coded
    )
    restore = cand("restore", content="To restore one file, open the archive list.", **coded)
    elsewhere = cand("other", "g2", "The NB-7 restore list", entity_keys=frozenset({"nb 7"}), title="Notes")
    channels = {
        "exact": [Scored(cover, 0.9, "identifier"), Scored(elsewhere, 0.9, "identifier")],
        "lexical": [Scored(elsewhere, 4.0), Scored(restore, 3.0)],
        "vector": [Scored(restore, 0.5)],
    }
    analysis = analyze_query("How do I restore one file on the NB-7?")
    assert analysis.exact_keys == ("nb 7",)
    # the guide's title page stood for the guide; the notes' mention of the code is its own hit
    assert exact_ids(select_named_documents(channels, analysis, 3)) == ["restore", "other"]
    # a question whose keys are not all in the name: its entity hits are about the thing itself
    both = analyze_query("How do I restore one file with K-28 on the NB-7?")
    cover_k = cand("cover", content="NB-7 and K-28", entity_keys=frozenset({"nb 7", "k 28"}), **coded)
    mixed = {**channels, "exact": [Scored(cover_k, 0.9, "identifier")]}
    assert exact_ids(select_named_documents(mixed, both, 3)) == ["cover"]
    # a row labelled with the code is the row of that code, not the document's name
    row = cand(
        "row",
        content="NB-7 | 2 TB",
        kind="table_row",
        row_label="NB-7",
        entity_keys=frozenset({"nb 7"}),
        **coded,
    )
    labelled = {**channels, "exact": [Scored(row, 1.0, "row_label"), Scored(cover, 0.9, "identifier")]}
    assert exact_ids(select_named_documents(labelled, analysis, 3)) == ["row", "restore"]
