"""The answer validator: every code and every verdict."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.evidence.query.refusal import SAFE_REFUSAL
from app.evidence.query.schemas import EvidenceInput, ValidateV2Request
from app.evidence.query.validate import is_refusal, validate_v2

EVIDENCE = [
    EvidenceInput(
        citation_id="V2-1",
        content="Sizes\nType: K 28\nLength (mm): 14\nWeight [kg]: 3,5",
        table_title="Sizes",
        row_label="K 28",
        headers=["Type", "Length (mm)", "Weight [kg]"],
        row_values=["K 28", "14", "3,5"],
        units=[None, "mm", "kg"],
    ),
    EvidenceInput(
        citation_id="V2-2",
        content="The B-DETECTION_PLUS mode must only be used with the guard closed. Rated at 230 V.",
        title="Safety manual",
        section=["Operation"],
    ),
]


def check(answer: str, constraints: list[str] | None = None, expected: bool = False):
    return validate_v2(answer, EVIDENCE, constraints or [], expected)


def found(result) -> list[tuple[str, str, str | None]]:
    return [(v.code, v.severity, v.value) for v in result.violations]


def test_a_supported_cited_answer_passes() -> None:
    result = check(
        'K 28 is 14 mm long [V2-1]; use "only be used with the guard closed" in B-DETECTION_PLUS mode '
        "[V2-2] at 230 V."
    )
    assert result.verdict == "pass" and result.violations == []


def test_header_units_support_numbers() -> None:
    # "3,5" under "Weight [kg]" supports "3.5 kg"; "14" under "Length (mm)" supports "14 mm"
    assert check("It weighs 3.5 kg and is 14 mm long [V2-1].").verdict == "pass"


def test_unknown_citation() -> None:
    result = check("K 28 is 14 mm long [V2-1, V2-7].")
    assert found(result) == [("unknown_citation", "error", "V2-7")] and result.verdict == "refuse"


def test_uncited_answer_only_qualifies() -> None:
    result = check("K 28 is 14 mm long.")
    assert found(result) == [("uncited_answer", "warning", None)] and result.verdict == "qualify"


def test_unsupported_quote() -> None:
    result = check('The manual says "never open the guard while running" [V2-2].')
    assert found(result) == [("unsupported_quote", "error", "never open the guard while running")]
    # a short quote (under 8 characters) is not checked
    assert check('It is called "guard" [V2-2].').verdict == "pass"


def test_unsupported_quantity() -> None:
    result = check("K 28 is 15 mm long [V2-1].")
    assert found(result) == [("unsupported_quantity", "error", "15 mm")] and result.verdict == "refuse"


def test_unsupported_identifier() -> None:
    result = check("K 29 is 14 mm long [V2-1].")
    assert found(result) == [("unsupported_identifier", "error", "K 29")]
    assert check("Use C-DETECTION_PLUS [V2-2].").violations[0].value == "C-DETECTION_PLUS"


def test_missing_constraint_unless_refusing() -> None:
    result = check("K 28 is 14 mm long [V2-1].", constraints=["guard closed"])
    assert found(result) == [("missing_constraint", "error", "guard closed")]
    assert check("K 28 is 14 mm long, guard closed [V2-1].", constraints=["Guard-closed"]).verdict == "pass"
    assert check(SAFE_REFUSAL, constraints=["guard closed"]).verdict == "pass"


def test_expected_refusal() -> None:
    result = check("K 28 is 14 mm long [V2-1].", expected=True)
    assert found(result) == [("refusal_expected", "error", None)]
    assert check(SAFE_REFUSAL, expected=True).verdict == "pass"
    assert check("Die Dokumente enthalten keine Angaben dazu.", expected=True).verdict == "pass"
    assert check("I could not find that in the documents.", expected=True).verdict == "pass"


def test_claims_in_a_refusal_are_still_checked() -> None:
    # a refusal phrase is no way around the checks
    result = check("I could not find the torque, but K 28 takes 99 Nm.", expected=True)
    assert found(result) == [("unsupported_quantity", "error", "99 Nm")]


def test_empty_answer() -> None:
    assert found(check("   ")) == [("empty_answer", "error", None)]


def test_no_evidence_and_a_refusal_passes() -> None:
    assert validate_v2(SAFE_REFUSAL, [], [], True).verdict == "pass"
    assert validate_v2("K 28 is 14 mm.", [], [], False).verdict == "refuse"


@pytest.mark.parametrize(
    ("answer", "refuses"),
    [
        (SAFE_REFUSAL, True),
        ("The documents do not contain this.", True),
        ("Dazu habe ich nichts gefunden; die Unterlagen enthalten keine Informationen.", True),
        ("Das wurde nicht gefunden.", True),
        ("K 28 is 14 mm long.", False),
        ("The contents are listed in table 3.", False),
    ],
)
def test_is_refusal(answer: str, refuses: bool) -> None:
    assert is_refusal(answer) is refuses


def test_request_model_bounds() -> None:
    body = ValidateV2Request.model_validate(
        {"answer": "a", "evidence": [{"citation_id": "V2-1", "content": "c", "score": 0.5, "extra": 1}]}
    )
    assert body.evidence[0].citation_id == "V2-1" and body.safe_refusal_expected is False
    with pytest.raises(ValidationError):
        ValidateV2Request.model_validate({"answer": "x" * 50_001})
    with pytest.raises(ValidationError):
        ValidateV2Request.model_validate({"answer": "a", "evidence": [{"content": "no id"}]})
