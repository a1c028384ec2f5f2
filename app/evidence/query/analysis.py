"""Query analysis: what a question asks for, in the index's own normalised terms.

    analyze_query("Max. length of K 28 in table 3?") ->
        terms ("max", "length", "k", "28", "table", "3"), identifiers ("k 28",), intents {"table_lookup"}

Terms are the normalised tokens minus a small stopword list (English and German), in order and
unique. Identifiers, standards, quantities and dates come from the same entity extractor the index
uses; quoted phrases ("...", “...”, „...“, «...») are kept as normalised phrases. Intents are
found from configurable trigger words: `table_lookup`, `document_lookup`, `citation_request`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from app.text.entities import Entity, EntityExtractor, default_extractor, detect_language
from app.text.lexicon import QUESTION_WORDS, STOPWORDS_DE, STOPWORDS_EN
from app.text.normalize import contains_phrase, normalize, normalize_kept, tokenize

TABLE_LOOKUP = "table_lookup"
DOCUMENT_LOOKUP = "document_lookup"
CITATION_REQUEST = "citation_request"

DEFAULT_INTENT_TRIGGERS: dict[str, tuple[str, ...]] = {
    TABLE_LOOKUP: (
        "table", "tables", "row", "column", "value", "values", "rating", "rated", "maximum", "minimum",
        "how much", "how many", "specification", "tabelle", "zeile", "spalte", "wert", "werte",
        "wie viel", "wie viele", "höchstwert", "mindestwert",
    ),
    DOCUMENT_LOOKUP: (
        "document", "documents", "file", "files", "manual", "datasheet", "data sheet", "guide",
        "handbook", "which document", "dokument", "dokumente", "datei", "handbuch", "anleitung",
        "datenblatt", "in welchem dokument",
    ),
    CITATION_REQUEST: (
        "cite", "citation", "quote", "source", "sources", "reference", "page", "where does it say",
        "where is it written", "zitat", "zitiere", "zitieren", "quelle", "quellen", "seite",
        "fundstelle", "beleg", "wo steht",
    ),
}  # fmt: skip

# A command-line option written as such ("--dry-run", "--log-http"): a name to find, not prose.
_OPTION = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*")
# A qualified name ("pathlib.PurePath.as_uri", "std::vector::push_back"): documentation writes it
# shortened under its module or class ("PurePath.as_uri()"), so its trailing parts count too.
_QUALIFIER = re.compile(r"\.|::|/")
_QUOTES = re.compile(r'"([^"]{2,})"|“([^”]{2,})”|„([^“”]{2,})[“”]|«([^»]{2,})»|‚([^‘’]{2,})[‘’]')


class QueryConfig(BaseModel):
    """Stopwords and intent triggers of query analysis."""

    model_config = ConfigDict(frozen=True)

    # function words of both languages and the words of question phrasing (never a query term)
    stopwords: frozenset[str] = STOPWORDS_EN | STOPWORDS_DE | QUESTION_WORDS
    intent_triggers: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_INTENT_TRIGGERS))


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """Everything V2 reads from a question, normalised like the index."""

    raw: str
    normalized: str
    tokens: tuple[str, ...]
    terms: tuple[str, ...]
    identifiers: tuple[Entity, ...] = ()
    standards: tuple[Entity, ...] = ()
    quantities: tuple[Entity, ...] = ()
    dates: tuple[Entity, ...] = ()
    document_numbers: tuple[Entity, ...] = ()
    phrases: tuple[str, ...] = ()
    intents: frozenset[str] = frozenset()
    language: str | None = None

    @property
    def prose(self) -> bool:
        """A question of plain words: no name, quoted phrase, quantity or table intent."""
        return not (self.names or self.phrases or self.quantities or TABLE_LOOKUP in self.intents)

    @property
    def names(self) -> tuple[Entity, ...]:
        """The identifiers, standards and document numbers of the query, in that order."""
        return (*self.identifiers, *self.standards, *self.document_numbers)

    @property
    def exact_keys(self) -> tuple[str, ...]:
        """Normalised names the exact channel looks up: every name and its shortened forms."""
        seen: dict[str, None] = {}
        for entity in self.names:
            # a last part alone would match every chunk that mentions it: the channel looks up tails
            for key in name_variants(entity, last_part=False):
                seen.setdefault(key, None)
        return tuple(seen)


def name_parts(entity: Entity) -> list[str]:
    """The parts of a qualified name as written ("pathlib.PurePath.as_uri" -> pathlib, PurePath, as_uri)."""
    return [part for part in _QUALIFIER.split(entity.raw) if part.strip()]


def _distinctive(part: str) -> bool:
    """A last part that names one thing on its own: `types_map_inv`, `blake2s`, `cancelling`."""
    return "_" in part or any(ch.isdigit() for ch in part) or len(part) >= 8


def name_variants(entity: Entity, *, last_part: bool = True) -> tuple[str, ...]:
    """The normalised forms a name may be written in: itself, then its qualified tails.

    "pathlib.PurePath.as_uri" -> ("pathlib purepath as uri", "purepath as uri", "as uri"):
    documentation writes a method under its class ("PurePath.as_uri()", or just "as_uri()" inside
    the class's entry). A tail keeps at least two parts, except the last part alone when it is
    distinctive (an underscore, a digit, or 8+ characters) and `last_part` allows it: "wait_for"
    stands for "asyncio.Condition.wait_for", "get" does not stand for "dict.get".
    """
    forms = [entity.normalized]
    parts = name_parts(entity)
    for start in range(1, len(parts) - 1):
        tail = normalize(" ".join(parts[start:]))
        if tail and tail not in forms:
            forms.append(tail)
    if last_part and len(parts) >= 3 and _distinctive(parts[-1]):
        tail = normalize(parts[-1])
        if tail and tail not in forms:
            forms.append(tail)
    return tuple(forms)


def analyze_query(
    text: str, config: QueryConfig | None = None, extractor: EntityExtractor | None = None
) -> QueryAnalysis:
    """Analyse a question (pure: same text and configuration, same analysis)."""
    config = config or QueryConfig()
    extractor = extractor or default_extractor()
    language = detect_language(text, min_hits=1, min_ratio=1.0)
    tokens = tuple(tokenize(text))
    terms = tuple(dict.fromkeys(token for token in tokens if token not in config.stopwords))
    entities = extractor.extract(text, language)

    def of(kind: str) -> tuple[Entity, ...]:
        unique: dict[str, Entity] = {}
        for entity in entities:
            if entity.kind == kind:
                unique.setdefault(entity.normalized, entity)
        return tuple(unique.values())

    identifiers = list(of("identifier"))
    known = {entity.normalized for entity in identifiers}
    for match in _OPTION.finditer(text):
        option = Entity("identifier", match.group(0), normalize(match.group(0)), match.start(), match.end())
        if option.normalized and option.normalized not in known:
            known.add(option.normalized)
            identifiers.append(option)
    phrases = []
    for match in _QUOTES.finditer(text):
        phrase = normalize(next(group for group in match.groups() if group))
        if phrase and phrase not in phrases:
            phrases.append(phrase)
    normalized = " ".join(tokens)
    intents = {
        intent
        for intent, triggers in config.intent_triggers.items()
        if any(contains_phrase(normalized, normalize_kept(trigger)) for trigger in triggers)
    }
    document_numbers = of("document_number")
    if document_numbers or of("standard"):
        intents.add(DOCUMENT_LOOKUP)
    return QueryAnalysis(
        raw=text,
        normalized=normalized,
        tokens=tokens,
        terms=terms,
        identifiers=tuple(identifiers),
        standards=of("standard"),
        quantities=of("quantity"),
        dates=of("date"),
        document_numbers=document_numbers,
        phrases=tuple(phrases),
        intents=frozenset(intents),
        language=language,
    )
