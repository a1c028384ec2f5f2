"""What the three channels of `/query_v2` are asked, derived from the query analysis (pure).

    plan = plan_channels(analyze_query("What is the default of max_size in table 3?"))
    plan.lexical_terms   ("default", "max", "size", "table", "3")   BM25 over these
    plan.exact_keys      identifiers, standards, document numbers (normalised)
    plan.exact_phrases   normalised n-grams ("max size", "default of max size", ...) that a row
                         label, title or file name may equal
    plan.trigram_text    the normalised query when it is short and looks like an identifier, else None

N-grams made only of stopwords are left out ("of the" names no row), and so are single tokens of
one character; at most `max_phrases` are sent, shortest n first, so a long question cannot send
thousands of keys to the database.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.evidence.query.analysis import QueryAnalysis

MAX_PHRASE_TOKENS = 6
MAX_PHRASES = 200
# a query of at most this many terms may be an identifier written another way ("maxsize" for "max_size")
TRIGRAM_MAX_TERMS = 3


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    """The inputs of the exact and lexical channels for one query."""

    lexical_terms: tuple[str, ...]
    exact_keys: tuple[str, ...]
    exact_phrases: tuple[str, ...]
    trigram_text: str | None


def exact_phrases(
    tokens: tuple[str, ...],
    stopwords: frozenset[str],
    *,
    max_tokens: int = MAX_PHRASE_TOKENS,
    limit: int = MAX_PHRASES,
) -> tuple[str, ...]:
    """Distinct n-grams (1..max_tokens tokens) of the normalised query that could name something."""
    out: dict[str, None] = {}
    for n in range(1, max_tokens + 1):
        for start in range(0, len(tokens) - n + 1):
            gram = tokens[start : start + n]
            if all(token in stopwords for token in gram):
                continue
            if n == 1 and len(gram[0]) < 2:
                continue
            out.setdefault(" ".join(gram), None)
            if len(out) >= limit:
                return tuple(out)
    return tuple(out)


def identifier_like(query: QueryAnalysis) -> bool:
    """True for short queries that look like a name: an identifier entity, a digit, or joined words."""
    if not query.terms or len(query.terms) > TRIGRAM_MAX_TERMS:
        return False
    if query.identifiers or query.standards or query.document_numbers:
        return True
    if any(ch.isdigit() for ch in query.normalized):
        return True
    # "max_size", "os.path.join", "--dry-run": words joined by punctuation are names, not prose
    return any(mark in query.raw for mark in ("_", ".", "::", "--", "/")) and " " not in query.raw.strip()


def plan_channels(query: QueryAnalysis, stopwords: frozenset[str]) -> ChannelPlan:
    """The channel inputs of `query` (see the module docstring)."""
    return ChannelPlan(
        lexical_terms=query.terms,
        exact_keys=query.exact_keys,
        exact_phrases=exact_phrases(query.tokens, stopwords),
        trigram_text=query.normalized if identifier_like(query) else None,
    )
