"""Redaction of personal data on its way to a third party (PII_REDACT), counted per destination.

    redact = redactor_for("embeddings", settings.pii_redact)   # None when that destination is off
    texts = [redact(t) for t in texts] if redact else texts

The detectors are `app/text/pii.py`'s; what leaves is redacted, what is stored is not
(docs/privacy.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app import metrics
from app.text.pii import Redactor

Redact = Callable[[str], str]


def redactor_for(destination: str, chosen: Sequence[str]) -> Redact | None:
    """A function redacting text bound for `destination`, or None when PII_REDACT does not name it."""
    if destination not in chosen:
        return None
    redactor = Redactor()
    counter = metrics.PII_REDACTED

    def redact(text: str) -> str:
        spans = redactor.spans(text)
        for span in spans:
            counter.labels(destination, span.kind).inc()
        return redactor.replace(text, spans)

    return redact
