"""The answer validator of `POST /validate_v2`: deterministic, no model.

    validate_v2(answer, evidence, mandatory_constraints, safe_refusal_expected) -> ValidateV2Response

Checks, each a violation `{code, severity, message, value}`:
    empty_answer            error    the answer has no text
    unknown_citation        error    a [V2-n] citation names no evidence item
    uncited_answer          warning  an answer that does not refuse cites nothing although evidence exists
    unsupported_quote       error    a quoted span of 8+ characters occurs in no evidence item
    unsupported_quantity    error    a number with a unit occurs in no evidence item
    unsupported_identifier  error    an identifier, standard or document number occurs in no evidence item
    missing_constraint      error    a mandatory constraint is absent from an answer that does not refuse
    refusal_expected        error    a refusal was expected and the answer does not refuse
Claims are checked in refusals too ("K 29 is not listed" names K 29): a refusal asserts little, and
a refusal phrase must not become a way around the checks. Verdict: `refuse` on any error (show the
safe refusal instead), `qualify` on warnings only (show it with a caveat), else `pass`. Text is
compared in the shared normalisation, on token boundaries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.evidence.query.analysis import name_variants
from app.evidence.query.refusal import SAFE_REFUSAL
from app.evidence.query.schemas import EvidenceInput, ValidateV2Response, Violation
from app.text.entities import EntityExtractor, default_extractor, split_header_unit
from app.text.normalize import contains_phrase, normalize

MIN_QUOTE_CHARS = 8

REFUSAL_PHRASES_EN: tuple[str, ...] = (
    "cannot answer", "can not answer", "can't answer", "could not find", "couldn't find", "unable to find",
    "unable to answer", "not able to answer", "no information", "not enough information",
    "insufficient information", "do not contain", "does not contain", "don't contain", "doesn't contain",
    "not mentioned in", "not found in", "i don't know", "no relevant", "there is no evidence",
)  # fmt: skip
REFUSAL_PHRASES_DE: tuple[str, ...] = (
    "keine informationen", "keine angaben", "nicht beantworten", "nicht gefunden", "nicht finden",
    "nicht enthalten", "enthalten keine", "enthält keine", "keine hinweise", "nicht genügend informationen",
    "weiß ich nicht", "liegen keine", "nicht erwähnt",
)  # fmt: skip
_CITATION = re.compile(r"\[\s*(V2-\d+(?:\s*[,;]\s*V2-\d+)*)\s*\]", re.IGNORECASE)
_QUOTE = re.compile(r'"([^"\n]+)"|“([^”\n]+)”|„([^“”\n]+)[“”]|«([^»\n]+)»|‘([^’\n]+)’')


def is_refusal(answer: str, phrases: Sequence[str] = REFUSAL_PHRASES_EN + REFUSAL_PHRASES_DE) -> bool:
    """True when the answer says, in English or German, that the documents do not answer."""
    text = normalize(answer)
    if contains_phrase(text, normalize(SAFE_REFUSAL)):
        return True
    return any(contains_phrase(text, normalize(phrase)) for phrase in phrases)


def _evidence_texts(item: EvidenceInput, extractor: EntityExtractor) -> tuple[str, set[str]]:
    """The normalised text of one item (every field a claim may rest on) and its entity keys."""
    parts = [
        item.content,
        item.title or "",
        item.filename or "",
        " ".join(item.section),
        item.table_title or "",
        item.row_label or "",
        " ".join(item.headers),
        " ".join(item.row_values),
        " ".join(item.footnotes),
    ]
    raw = "\n".join(parts)
    keys = {entity.normalized for entity in extractor.extract(raw)}
    # a cell under "Length (mm)" states a length in mm: "12" there supports "12 mm"
    for position, cell in enumerate(item.row_values):
        unit = item.units[position] if position < len(item.units) else None
        if unit is None and position < len(item.headers):
            unit = split_header_unit(item.headers[position], extractor)[1]
        if unit:
            for entity in extractor.extract(f"{cell} {unit}"):
                if entity.kind == "quantity":
                    keys.add(entity.normalized)
    return normalize(raw), keys


def validate_v2(
    answer: str,
    evidence: Sequence[EvidenceInput],
    mandatory_constraints: Sequence[str] = (),
    safe_refusal_expected: bool = False,
    *,
    extractor: EntityExtractor | None = None,
) -> ValidateV2Response:
    """Check an answer against the evidence it was given (see the module docstring)."""
    extractor = extractor or default_extractor()
    violations: list[Violation] = []

    def add(code: str, severity: str, message: str, value: str | None = None) -> None:
        violations.append(Violation(code=code, severity=severity, message=message, value=value))

    if not answer.strip():
        add("empty_answer", "error", "The answer is empty")
        return _verdict(violations)
    refuses = is_refusal(answer)
    ids = {item.citation_id.strip().upper() for item in evidence}
    texts_keys = [_evidence_texts(item, extractor) for item in evidence]
    texts = [text for text, _ in texts_keys]
    keys = set().union(*(k for _, k in texts_keys)) if texts_keys else set()

    cited: list[str] = []
    for match in _CITATION.finditer(answer):
        cited.extend(part.strip().upper() for part in re.split(r"[,;]", match.group(1)))
    for citation in dict.fromkeys(cited):
        if citation not in ids:
            add("unknown_citation", "error", "The answer cites an evidence item that was not given", citation)
    if not cited and evidence and not refuses:
        add("uncited_answer", "warning", "The answer cites none of the evidence it was given")

    claims = _CITATION.sub(" ", answer)
    for match in _QUOTE.finditer(claims):
        span = next(group for group in match.groups() if group is not None).strip()
        if len(span) >= MIN_QUOTE_CHARS and not any(contains_phrase(t, normalize(span)) for t in texts):
            add("unsupported_quote", "error", "A quoted passage occurs in no evidence item", span)
    for entity in extractor.extract(claims):
        if entity.kind == "quantity":
            written = normalize(entity.raw)
            if entity.normalized not in keys and not any(contains_phrase(t, written) for t in texts):
                add(
                    "unsupported_quantity",
                    "error",
                    "A number with a unit occurs in no evidence item",
                    entity.raw,
                )
        elif entity.kind in ("identifier", "standard", "document_number"):
            forms = name_variants(entity)  # "pathlib.PurePath.as_uri" is supported by "PurePath.as_uri()"
            if not any(form in keys or any(contains_phrase(t, form) for t in texts) for form in forms):
                add("unsupported_identifier", "error", "An identifier occurs in no evidence item", entity.raw)

    if not refuses:
        normalized_answer = normalize(answer)
        for constraint in mandatory_constraints:
            wanted = normalize(constraint)
            if wanted and not contains_phrase(normalized_answer, wanted):
                add(
                    "missing_constraint",
                    "error",
                    "A mandatory constraint is missing from the answer",
                    constraint,
                )
    if safe_refusal_expected and not refuses:
        add("refusal_expected", "error", "The answer should refuse but does not")
    return _verdict(violations)


def _verdict(violations: list[Violation]) -> ValidateV2Response:
    if any(v.severity == "error" for v in violations):
        verdict = "refuse"
    elif violations:
        verdict = "qualify"
    else:
        verdict = "pass"
    return ValidateV2Response(verdict=verdict, violations=violations)
