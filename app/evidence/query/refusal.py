"""A refusal that is earned: decided from the evidence, never from a distance threshold.

Hard reasons (any one refuses):
    no_candidates        nothing authorised was found at all
    missing_identifier   an identifier, standard or document number of the query occurs in no candidate
                         (in any of its written forms: "PurePath.as_uri" for "pathlib.PurePath.as_uri",
                         or "popitem" in a candidate that names "Mailbox" for "mailbox.Mailbox.popitem")
    missing_phrase       a quoted phrase occurs in no candidate
    missing_quantity     a number with a unit occurs in no candidate
    missing_name         a name the question writes as one (an acronym, a CamelCase word, in an
                         English question a capitalised word inside the sentence, a word introduced
                         as a tool: "with borgbackup", "mit rclone", a word no English or German
                         dictionary knows: "an nftables ruleset", or one built of no known words
                         wherever it stands: "zeigt lsgpu") occurs in no chunk the caller may see
                         at all (document frequency 0 over the visible set, and no candidate holds
                         it in another inflection)
    missing_identifier   also: a path, an option with its value ("--sort=owner": the option and
                         the value in one candidate will do) or, in German, a lower-case hyphenated
                         word ("hibernate-at") that no candidate holds
Soft signals, weighed (`signals`):
    weak_rerank          the best reranker score is under `min_rerank_score`                 (lexical)
    rare_terms_missing   at least `rare_missing_share` of the query's rare words (in at most
                         `rare_share` of the chunks, or in none) occur in no candidate       (lexical)
    low_coverage         none of the best `coverage_depth` candidates holds `min_coverage` of
                         the query's terms                                                   (lexical)
    no_agreement         none of the top `agreement_depth` candidates was found by two channels
                         (counted only when at least two channels ran)                       (lexical)
    low_dense            nothing visible comes close in meaning: the vector channel's best cosine
                         similarity is under `min_dense_similarity` (only when that channel ran)
Signals refuse when their weights reach `refuse_at` AND low_dense is among them: a paraphrase fires
every other signal (its words are not the text's, so the lexical channel misses what the vector
channel finds and the channels disagree), so words never refuse on their own, however many.
A name or phrase the question quotes as its own example ('report.pdf', "[1, 2, 3]") is no hard
reason; a quoted phrase must hold two words of three letters or more to be one.

Terms are compared by their Snowball stems (English and German, app/text/stems.py) against the
candidate's text and its headings, so "returns" meets "return" and "Ventile" meets "Ventil"; the
words of question phrasing ("how much", "need", "wodurch", "darf") and contraction fragments are no
terms (app/text/lexicon.py), and the pieces of an identifier ("ext4" -> "ext" "4") do not count
as words (the identifier itself is checked whole, as a hard reason). The decision and every signal
are data, for `debug`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.evidence.query.analysis import QueryAnalysis, name_parts, name_variants
from app.evidence.query.records import Fused
from app.evidence.settings import RefusalSettings
from app.text import vocabulary
from app.text.entities import Entity
from app.text.normalize import contains_phrase, fold, normalize, tokenize
from app.text.stems import form_set, matches, stem_de, text_forms

# the signals that follow from a question's words not being the text's: a paraphrase fires them all
# (the channels disagree because the lexical one misses it); only the dense similarity is
# independent of them, and a soft refusal needs it
LEXICAL_SIGNALS = frozenset({"weak_rerank", "rare_terms_missing", "low_coverage", "no_agreement"})
# a value the question quotes as its own example ('report.pdf', "[1, 2]"): not a name to find
_QUOTED = re.compile(r"""(?<![\w'"])(['"‚„“«])([^'"‚„“”»]{1,200})['"‘’”»](?![\w'"])""")
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]{1,}\b")
_CAMEL = re.compile(r"\b[A-Za-z]+[a-z][A-Z][A-Za-z]*\b")
# words that introduce a tool by its name: "with borgbackup", "mit rclone" (the name follows as written)
_NAMED_BY = re.compile(
    r"\b(?:with|using|via|called|named|mit|über|namens)\s+(?:the\s+|a\s+|an\s+|dem\s+|der\s+|den\s+)?"
    r"([\w.+-]+)",
    re.I,
)
# a path of two parts or more; an option with a value; a lower-case hyphenated word
_PATH = re.compile(r"(?<![\w/.~-])(?:~|\.{1,2})?(?:/[\w.+@-]+){2,}/?")
_OPTION_VALUE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)=([\w.,:+-]+)")
_LOWER_HYPHENATED = re.compile(r"(?<![\w/.=-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w/=-])")
_CAPITALISED = re.compile(r"(?<![.!?:;]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
# a word of letters only (hyphenated compounds give their parts), for the dictionary check
_LETTERS = re.compile(r"[^\W\d_]+")
# words after which a question names a thing: "use X", "configure X", "an X ruleset", "mit X"
# (articles are no introducers: "inside a virtualenv" introduces a thing the documents call otherwise)
_INTRODUCERS = frozenset("with using use via called named configure install run mit über per namens".split())

SAFE_REFUSAL = "I could not find this in the documents available to you, so I cannot answer it from them."


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason or signal: a code and the value it is about (a term, a score)."""

    code: str
    value: str | float | None = None


@dataclass(frozen=True, slots=True)
class RefusalDecision:
    """Whether to refuse, the hard reasons, and the soft signals that fired."""

    refuse: bool
    reasons: tuple[Reason, ...] = ()
    signals: tuple[Reason, ...] = ()
    checked: Mapping[str, object] = field(default_factory=dict)

    def as_debug(self) -> dict[str, object]:
        """A JSON-ready dict for the response's `debug`."""
        return {
            "refuse": self.refuse,
            "reasons": [{"code": r.code, "value": r.value} for r in self.reasons],
            "signals": [{"code": s.code, "value": s.value} for s in self.signals],
            "checked": dict(self.checked),
        }


def _found(items: Sequence[Fused], key: str, entity_key: str | None = None) -> bool:
    for item in items:
        candidate = item.candidate
        if entity_key is not None and entity_key in candidate.entity_keys:
            return True
        if contains_phrase(candidate.search_text, key):
            return True
    return False


def _member_found(items: Sequence[Fused], entity: Entity) -> bool:
    """A member of a qualified name written alone under its owner: "popitem()" in "Mailbox objects".

    "mailbox.Mailbox.popitem" is found where a candidate holds "popitem" and names "Mailbox" in its
    text, title, headings or caption (documentation lists a class's methods by their short names).
    """
    parts = name_parts(entity)
    if len(parts) < 3:
        return False
    member, owner = normalize(parts[-1]), normalize(parts[-2])
    if not member or not owner:
        return False
    for item in items:
        c = item.candidate
        if not contains_phrase(c.search_text, member):
            continue
        p = c.place
        around = normalize(
            " ".join(filter(None, (c.document.title, *p.section, p.table_caption, p.row_label)))
        )
        if contains_phrase(c.search_text, owner) or contains_phrase(around, owner):
            return True
    return False


def _looks_like_a_tool(word: str, language: str | None) -> bool:
    """A program's name is written in lower case and uninflected: not a German noun ("mit
    Tausendertrennzeichen") nor an inflected German word ("mit zufälligem")."""
    if not word[:1].islower():
        return False
    folded = fold(word)
    return language != "de" or not (folded.endswith(("em", "en", "er", "es")) and stem_de(folded) != folded)


def written_names(query: QueryAnalysis) -> list[str]:
    """Normalised tokens the question writes as names: acronyms, CamelCase, English capitals inside."""
    raw = query.raw.strip()
    found = [m.group(0) for m in _ACRONYM.finditer(raw)] + [m.group(0) for m in _CAMEL.finditer(raw)]
    if query.language == "en":  # German capitalises every noun: a capital says nothing there
        found += [m.group(0) for m in _CAPITALISED.finditer(raw) if m.start() > 0]
    found += [m.group(1) for m in _NAMED_BY.finditer(raw) if _looks_like_a_tool(m.group(1), query.language)]
    found += unknown_words(raw)
    terms = set(query.terms)
    out: dict[str, None] = {}
    for name in found:
        for token in tokenize(normalize(name)):
            if token in terms:
                out.setdefault(token, None)
    return list(out)


def unknown_words(raw: str) -> list[str]:
    """Words no English or German dictionary knows, written where a question names a tool.

    "configure dnsmasq", "use needrestart", "mit rclone": a lower-case word in no
    word list right after a word that introduces a thing (`_INTRODUCERS`). Alone, an unknown word
    says little: people write "repo", "codepage" or "misdetected" in answerable questions, and
    German compounds are in no list. A word inside quotes is the question's own example ('appel').
    """
    quoted = _quoted_spans(raw)
    out: list[str] = []
    previous = ""
    for m in _LETTERS.finditer(raw):
        word, before = m.group(0), previous
        previous = word.lower()
        if any(start <= m.start() and m.end() <= end for start, end in quoted):
            continue
        if len(word) < 4 or not word[:1].islower() or vocabulary.known(word):
            continue
        # introduced as a thing, or built of no known words at all ("lsgpu", "httpx", "nmcli")
        if before in _INTRODUCERS or not vocabulary.wordlike(word):
            out.append(word)
    return out


def written_identifiers(raw: str, language: str | None) -> list[tuple[str, tuple[str, ...]]]:
    """Names the question writes whole that the entity rules take apart, with the parts each needs.

    A path ("/etc/apt/apt-mark.conf"), an option with its value ("--sort=owner": the option and the
    value, as the documentation lists the values apart from the option) and, in a German question,
    a lower-case hyphenated word ("hibernate-at": German writes its compounds with capitals, so a
    lower-case one is a command or an option). Each is found when one candidate holds it whole, or
    holds every one of its parts. A name inside quotes is the question's own example.
    """
    quoted = _quoted_spans(raw)
    out: list[tuple[str, tuple[str, ...]]] = []

    def keep(m: re.Match[str], parts: tuple[str, ...]) -> None:
        if not any(start <= m.start() and m.end() <= end for start, end in quoted):
            out.append((m.group(0), parts))

    for m in _PATH.finditer(raw):
        keep(m, ())
    for m in _OPTION_VALUE.finditer(raw):
        keep(m, (m.group(1), m.group(2)))
    if language == "de":
        for m in _LOWER_HYPHENATED.finditer(raw):
            keep(m, ())
    return out


def _written_found(pool: Sequence[Fused], whole: str, parts: Sequence[str]) -> bool:
    key = normalize(whole)
    keys = [normalize(part) for part in parts]
    for item in pool:
        text = item.candidate.search_text
        if contains_phrase(text, key) or (keys and all(contains_phrase(text, k) for k in keys if k)):
            return True
    return False


def coverage_terms(query: QueryAnalysis) -> list[str]:
    """The query's terms that are words: the pieces of its identifiers are checked whole elsewhere."""
    pieces: set[str] = set()
    for entity in (*query.names, *query.quantities):
        pieces.update(tokenize(normalize(entity.raw)))
    return [t for t in query.terms if t not in pieces]


def _offered(item: Fused) -> frozenset[str]:
    """Every stem form a candidate offers: its text, title, headings, caption, row label, headers."""
    c, p = item.candidate, item.candidate.place
    around = " ".join(filter(None, (c.document.title, *p.section, p.table_caption, p.row_label, *p.headers)))
    return form_set([*c.search_text.split(), *tokenize(normalize(around))])


def _quoted_spans(raw: str) -> list[tuple[int, int]]:
    return [(m.start(2), m.end(2)) for m in _QUOTED.finditer(raw)]


def _is_example(entity: Entity, spans: Sequence[tuple[int, int]]) -> bool:
    """True when the name sits inside quotes: the question's own value, not a name of the documents."""
    return any(start <= entity.start and entity.end <= end for start, end in spans)


def _worded(phrase: str) -> bool:
    """A quoted phrase of words (an error message, a title), not a literal value such as "[1, 2]"."""
    return sum(1 for token in phrase.split() if sum(c.isalpha() for c in token) >= 3) >= 2


def decide_refusal(
    query: QueryAnalysis,
    items: Sequence[Fused],
    policy: RefusalSettings | None = None,
    *,
    document_frequency: Mapping[str, int] | None = None,
    documents: int = 0,
    channels_run: int = 3,
    best_dense: float | None = None,
) -> RefusalDecision:
    """Refuse or answer, from what the candidates hold (see the module docstring)."""
    policy = policy or RefusalSettings()
    pool = list(items[: policy.depth])
    if not pool:
        return RefusalDecision(True, (Reason("no_candidates"),))
    reasons: list[Reason] = []
    examples = _quoted_spans(query.raw)
    for entity in query.names:
        if _is_example(entity, examples):
            continue
        if not any(_found(pool, form, form) for form in name_variants(entity)) and not _member_found(
            pool, entity
        ):
            reasons.append(Reason("missing_identifier", entity.raw))
    for whole, parts in written_identifiers(query.raw, query.language):
        if not _written_found(pool, whole, parts):
            reasons.append(Reason("missing_identifier", whole))
    for phrase in query.phrases:
        if _worded(phrase) and not _found(pool, phrase):
            reasons.append(Reason("missing_phrase", phrase))
    for quantity in query.quantities:
        if not _found(pool, normalize(quantity.raw), quantity.normalized):
            reasons.append(Reason("missing_quantity", quantity.raw))

    stats = document_frequency is not None and documents > 0
    # every stem form any candidate's text offers: read by the name check and the rare-term signal
    everywhere = frozenset().union(*(text_forms(i.candidate.search_text) for i in pool)) if stats else None
    if document_frequency is not None and everywhere is not None:
        # in no visible chunk, and no candidate holds it in another inflection either
        for token in written_names(query):
            if document_frequency.get(token, 0) == 0 and not matches(token, everywhere):
                reasons.append(Reason("missing_name", token))

    signals: list[Reason] = []
    best = max(item.final_score for item in pool)
    if best < policy.min_rerank_score:
        signals.append(Reason("weak_rerank", round(best, 4)))
    top = pool[: policy.agreement_depth]
    # agreement needs two channels that ran; with one left (a degraded search) it says nothing
    if channels_run >= 2 and not any(len(item.channels) >= 2 for item in top):
        signals.append(Reason("no_agreement"))
    checked: dict[str, object] = {"best_score": round(best, 4), "candidates": len(pool)}
    if best_dense is not None:
        checked["best_dense"] = round(best_dense, 4)
        if best_dense < policy.min_dense_similarity:
            signals.append(Reason("low_dense", round(best_dense, 4)))
    offered = [_offered(item) for item in pool[: max(policy.coverage_depth, 1)]]
    if document_frequency is not None and everywhere is not None:
        rare = [t for t in query.terms if document_frequency.get(t, 0) <= policy.rare_share * documents]
        missing = [t for t in rare if not matches(t, everywhere)]
        checked["rare_terms"] = rare
        if rare and len(missing) / len(rare) >= policy.rare_missing_share:
            signals.append(Reason("rare_terms_missing", " ".join(missing)))
    terms = coverage_terms(query)
    if terms:
        coverage = max(sum(matches(t, forms) for t in terms) / len(terms) for forms in offered)
        checked["coverage"] = round(coverage, 4)
        if coverage < policy.min_coverage:
            signals.append(Reason("low_coverage", round(coverage, 4)))
    weight = sum(policy.signals.of(signal.code) for signal in signals)
    checked["signal_weight"] = round(weight, 4)
    independent = any(signal.code not in LEXICAL_SIGNALS for signal in signals)
    refuse = bool(reasons) or (weight >= policy.refuse_at - 1e-9 and independent)
    return RefusalDecision(refuse, tuple(reasons), tuple(signals), checked)
