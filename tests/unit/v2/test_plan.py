"""What the channels are asked: n-grams for the exact channel, the trigram leg for names (pure)."""

from __future__ import annotations

from app.evidence.query.analysis import analyze_query
from app.evidence.query.plan import MAX_PHRASES, exact_phrases, identifier_like, plan_channels
from app.text.lexicon import STOPWORDS_DE, STOPWORDS_EN

STOP = STOPWORDS_EN | STOPWORDS_DE


def test_phrases_are_the_query_ngrams_that_can_name_something() -> None:
    phrases = exact_phrases(("weight", "of", "the", "k", "28"), STOP)
    assert "k 28" in phrases and "weight of the k 28" in phrases and "weight" in phrases
    assert "of the" not in phrases and "of" not in phrases  # only stopwords: names nothing
    assert "k" not in phrases  # one character alone
    assert len(phrases) == len(set(phrases))


def test_phrases_are_bounded_for_long_questions() -> None:
    tokens = tuple(f"word{i}" for i in range(400))
    phrases = exact_phrases(tokens, STOP)
    assert len(phrases) == MAX_PHRASES
    assert phrases[0] == "word0"  # shortest first: single words before any pair
    assert all(" " not in p for p in phrases)


def test_longest_phrase_is_six_tokens() -> None:
    phrases = exact_phrases(tuple("abcdefgh"), frozenset(), max_tokens=6)
    assert max(len(p.split()) for p in phrases) == 6


def test_short_identifier_like_queries_get_the_trigram_leg() -> None:
    assert identifier_like(analyze_query("max_size"))
    assert identifier_like(analyze_query("os.path.join"))
    assert identifier_like(analyze_query("K 28"))
    assert not identifier_like(analyze_query("how do I mount the heater on a wall"))
    assert not identifier_like(analyze_query("heater"))  # a plain word is BM25's job


def test_plan_carries_the_analysis() -> None:
    query = analyze_query('Which document defines "max size" for ISO 9001?')
    plan = plan_channels(query, STOP)
    assert plan.lexical_terms == query.terms
    assert plan.exact_keys == query.exact_keys and "iso 9001" in plan.exact_keys
    assert "max size" in plan.exact_phrases
    assert plan.trigram_text is None
