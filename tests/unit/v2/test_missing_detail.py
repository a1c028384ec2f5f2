"""Why an evidence answer is degraded, in words (app/evidence/store/gaps.py `describe_missing`)."""

from app.evidence.store.gaps import MissingFile, describe_missing


def test_the_detail_counts_each_reason_and_names_a_failure() -> None:
    missing = [
        MissingFile("a", "indexing"),
        MissingFile("b", "replaced"),
        MissingFile("c", "failed", "the parser refused it"),
        MissingFile("d", "indexing"),
    ]
    assert describe_missing(missing) == (
        "4 requested files missing from the evidence index: 2 not indexed yet; 1 uploaded again, the new "
        "version not indexed yet (the old one is not used); 1 could not be indexed: the parser refused it"
    )
    assert describe_missing([MissingFile("a", "failed")]) == (
        "1 requested file missing from the evidence index: 1 could not be indexed"
    )
