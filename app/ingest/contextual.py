"""Contextual chunking: one model-written sentence situating each chunk in its document, embedded.

    contextualizer = build_contextualizer(contextual)   # a ContextualSettings; None when it is off
    done = await contextualizer.situate("manual.pdf", texts, indexes)
    embedded = [with_context(s, texts[i]) for s, i in zip(done.sentences, indexes)]

The sentence goes in front of the text that is embedded (and, for V2, of the text indexed lexically),
never into the stored content the model reads. Everything is bounded: each request carries a window
of the document around its chunk (`WINDOW_CHARS`, not a 1,000-page manual) and the chunk itself (at
most `CHUNK_CHARS`); the reply is cleaned to one sentence of at most `SENTENCE_CHARS`; a document
gets `CONTEXTUAL_CHUNKING_CONCURRENCY` requests at a time and `CONTEXTUAL_CHUNKING_BUDGET_S` in all,
and after `STOP_AFTER_FAILURES` failures in a row the rest of it is not asked for. A chunk without a
sentence (a slow, failing or babbling endpoint; past the budget) is embedded raw: indexing never
fails because of this, and the log counts what happened.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app import metrics
from app.clients.chat import ChatClient, ChatFailed
from app.clients.redaction import redactor_for
from app.config_sections import ContextualSettings

logger = logging.getLogger(__name__)

# Characters of the document sent per request around the chunk, its beginning included (about
# 2,000 tokens); the chunk is sent again on its own, cut to CHUNK_CHARS.
WINDOW_CHARS = 8000
HEAD_CHARS = 1000  # the document's beginning (title, scope) leads every window that starts later
CHUNK_CHARS = 4000
SENTENCE_CHARS = 300  # the cleaned sentence, at most; the request asks for at most 120 tokens
STOP_AFTER_FAILURES = 5  # failures in a row after which a document's other chunks stay raw
GAP = "\n[…]\n"

SYSTEM_PROMPT = (
    "You situate passages of a document for a search index. Answer with one short sentence (at most "
    "30 words) that says what the passage is about and where it sits in the document: the document, "
    "the product or subject, the section. Write in the language of the passage. Do not repeat the "
    "passage, do not answer questions in it, no preamble."
)

# One sentence ends at . ! ? (or their full-width forms) followed by space and a capital, maybe
# behind an opening quote: "e.g. the" and "Fig. 3" run on, "It heats. The" stops.
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+(?=[\"'„“«(\[]?[A-ZÄÖÜ])")
_LABEL = re.compile(r"^(?:context|kontext|sentence|answer|antwort)\s*:\s*", re.IGNORECASE)
_QUOTES = "\"'`„“”«»‚‘’"


def document_window(texts: Sequence[str], index: int, *, max_chars: int = WINDOW_CHARS) -> str:
    """The document around chunk `index`: its neighbours outward until `max_chars`, led by its head.

    Chunks are taken alternately before and after `index`, the last one cut to what is left; when
    the window does not reach the document's start, its first HEAD_CHARS lead it, and "[…]" marks
    every gap.
    """
    if not texts:
        return ""
    own = texts[index][:max_chars]
    # room kept for the document's beginning, in case the window does not reach it
    reserve = min(_chars_before(texts, index, HEAD_CHARS), max_chars - len(own))
    left = max_chars - len(own) - reserve
    before: list[str] = []
    after: list[str] = []
    lo, hi = index - 1, index + 1
    while left > 0 and (lo >= 0 or hi < len(texts)):
        if lo >= 0:
            piece = texts[lo][-left:]
            before.append(piece)
            left -= len(piece)
            lo -= 1
        if lo < 0 and reserve:
            left, reserve = left + reserve, 0  # the window reached the beginning: room for more after
        if left > 0 and hi < len(texts):
            piece = texts[hi][:left]
            after.append(piece)
            left -= len(piece)
            hi += 1
    parts: list[str] = []
    if lo >= 0:
        # the window starts after the document's beginning: lead with that (what is left of it
        # before the window), then a gap
        head = _head(itertools.islice(texts, lo + 1), reserve)
        parts += [head, GAP] if head else [GAP]
    parts.append("\n".join([*reversed(before), own, *after]))
    if hi < len(texts):
        parts.append(GAP)
    return "".join(parts)


def _chars_before(texts: Sequence[str], index: int, limit: int) -> int:
    """Characters of the chunks before `index`, counted up to `limit` (a long document stops early)."""
    total = 0
    for text in itertools.islice(texts, index):  # no copy of a long document's list
        total += len(text)
        if total >= limit:
            return limit
    return total


def _head(texts: Iterable[str], limit: int) -> str:
    out: list[str] = []
    used = 0
    for text in texts:
        if used >= limit:
            break
        out.append(text[: limit - used])
        used += len(out[-1])
    return "\n".join(out)


def build_messages(title: str, window: str, chunk: str) -> list[dict[str, str]]:
    """The chat messages asking for chunk's situating sentence (bounded: see the module's docstring)."""
    user = (
        f"Document: {title[:200]}\n\n<document>\n{window}\n</document>\n\n"
        f"<passage>\n{chunk[:CHUNK_CHARS]}\n</passage>\n\n"
        "One short sentence situating this passage in the document:"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def clean_sentence(raw: str, *, max_chars: int = SENTENCE_CHARS) -> str | None:
    """One clean sentence of a reply, or None when nothing usable is left.

    Control and format characters, NUL and lone surrogates go; whitespace is collapsed; a leading
    "Context:" and surrounding quotes go; the first sentence is kept, cut at a word before
    `max_chars`. A reply with fewer than three letters is garbage (None).
    """
    kept = []
    for char in raw:
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Cs", "Co", "Cn"):
            # newlines and tabs separate words; the rest (NUL, escapes, bidi controls) just goes
            kept.append(" " if char in "\n\r\t\v\f" else "")
        else:
            kept.append(char)
    text = " ".join("".join(kept).split())
    text = _LABEL.sub("", text).strip().strip(_QUOTES).strip()
    text = _SENTENCE_END.split(text, maxsplit=1)[0]
    if len(text) > max_chars:
        cut = text[: max_chars - 1]
        space = cut.rfind(" ")
        text = (cut[:space] if space > max_chars // 2 else cut).rstrip(" ,;:-") + "…"
    if sum(1 for char in text if char.isalpha()) < 3:
        return None
    return text


def with_context(sentence: str | None, text: str) -> str:
    """The text to embed: the sentence on a line of its own before `text`, or `text` alone."""
    return f"{sentence}\n{text}" if sentence else text


@dataclass
class Situated:
    """The sentences of one document's chunks (None: embedded raw) and what happened to the others."""

    sentences: list[str | None]
    asked: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    stopped: int = 0  # not asked: the endpoint had failed STOP_AFTER_FAILURES times in a row
    over_budget: int = 0  # not asked, or cut off: the document's time budget was spent
    seconds: float = 0.0

    @property
    def situated(self) -> int:
        """Chunks that have a sentence."""
        return sum(1 for s in self.sentences if s is not None)

    @property
    def raw(self) -> int:
        """Chunks that are embedded without one."""
        return len(self.sentences) - self.situated

    def describe(self) -> str:
        """One line for the log: how many were situated, and why the others were not."""
        line = f"{self.situated} of {len(self.sentences)} chunks situated in {self.seconds:.1f} s"
        reasons = [f"{count} {reason}" for reason, count in self.failures.most_common()]
        if self.stopped:
            reasons.append(f"{self.stopped} not asked after {STOP_AFTER_FAILURES} failures in a row")
        if self.over_budget:
            reasons.append(f"{self.over_budget} past the time budget")
        return line + (f"; embedded raw: {', '.join(reasons)}" if reasons else "")


class Contextualizer:
    """Asks the chat endpoint for each chunk's sentence, within a document's concurrency and budget."""

    def __init__(self, client: ChatClient, *, concurrency: int, budget_s: float) -> None:
        self.client = client
        self.model = client.model
        self.concurrency = concurrency
        self.budget_s = budget_s

    async def situate(
        self, title: str, texts: Sequence[str], indexes: Sequence[int] | None = None
    ) -> Situated:
        """Sentences for `texts[i]` of each `i` in `indexes` (default: all), aligned with `indexes`."""
        wanted = list(range(len(texts))) if indexes is None else list(indexes)
        done = Situated([None] * len(wanted))
        started = time.monotonic()
        deadline = started + self.budget_s
        queue = iter(enumerate(wanted))
        in_a_row = 0
        pending: set[int] = set()

        async def work() -> None:
            nonlocal in_a_row
            for slot, index in queue:
                if time.monotonic() >= deadline:
                    done.over_budget += 1
                    continue
                if in_a_row >= STOP_AFTER_FAILURES:
                    done.stopped += 1
                    continue
                pending.add(slot)
                done.asked += 1
                messages = build_messages(title, document_window(texts, index), texts[index])
                try:
                    sentence = clean_sentence(await self.client.complete(messages))
                except ChatFailed as exc:
                    sentence, reason = None, exc.reason
                else:
                    reason = "garbage reply" if sentence is None else ""
                pending.discard(slot)
                if sentence is None:
                    done.failures[reason] += 1
                    in_a_row += 1
                else:
                    done.sentences[slot] = sentence
                    in_a_row = 0

        workers = [asyncio.create_task(work()) for _ in range(min(self.concurrency, len(wanted)))]
        if workers:
            _, late = await asyncio.wait(workers, timeout=max(deadline - time.monotonic(), 0))
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            # requests in flight at the deadline, and what no worker reached
            done.over_budget += len(pending) + sum(1 for _ in queue)
        done.seconds = time.monotonic() - started
        return done

    async def aclose(self) -> None:
        """Close the chat client."""
        await self.client.aclose()


def build_contextualizer(settings: ContextualSettings) -> Contextualizer | None:
    """The contextualizer CONTEXTUAL_CHUNKING_* configure, or None when it is off."""
    if not settings.enabled:
        return None
    # Settings refuses the feature on without both; the assert only narrows the types
    assert settings.base_url and settings.model
    key = settings.api_key
    client = ChatClient(
        base_url=settings.base_url,
        model=settings.model,
        api_key=key.get_secret_value() if key is not None else None,
        timeout_s=settings.timeout_ms / 1000,
        max_connections=max(16, 2 * settings.concurrency),
        redact=redactor_for("contextual", ["contextual"] if settings.redact_pii else []),
    )
    return Contextualizer(client, concurrency=settings.concurrency, budget_s=settings.budget_s)


def log_situated(what: str, done: Situated) -> None:
    """Log and count one document's outcome: info when every chunk has its sentence, else a warning."""
    if not done.sentences:
        return
    counts = {
        "situated": done.situated,
        "failed": sum(done.failures.values()),
        "stopped": done.stopped,
        "over_budget": done.over_budget,
    }
    for outcome, count in counts.items():
        if count:
            metrics.CONTEXTUAL_CHUNKS.labels(outcome).inc(count)
    level = logging.INFO if done.raw == 0 else logging.WARNING
    logger.log(level, "%s: contextual chunking: %s", what, done.describe())
