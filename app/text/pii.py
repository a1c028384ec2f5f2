"""Personal data found in text and replaced by typed placeholders, before text leaves the service.

    redactor = Redactor()                          # every detector below
    redactor.redact("Mail an max@example.de")      # "Mail an <EMAIL_1>"
    redactor.spans(text)                           # [Span(kind, start, end, value)], for tests and counts

Deterministic and offline, no model:

    EMAIL    an address with a dotted domain
    PHONE    a number libphonenumber (`phonenumbers`) finds valid for its country; without a country
             code, read in each of `DEFAULT_REGIONS`' national formats (German, then North American):
             "030 1234567", "+49 (0)89 123 456-78", "0171/1234567", "(202) 555-0178"
    IBAN     two letters, two check digits and the account, the mod-97 checksum right (`stdnum.iban`)
    CARD     13 to 19 digits, in groups or not, the Luhn checksum right (`stdnum.luhn`)
    IPV4/6   an address `ipaddress` accepts, except loopback, unspecified and multicast ones ("127.0.0.1",
             "::1", "0.0.0.0": they name no one's machine; manuals quote them everywhere). A version
             number of four parts is an IPv4 address too: over-redaction costs a search little
    ADDRESS  a German street address ("Musterstraße 12a", "Am Ring 3, 12345 Berlin") or an English
             one ("221 Baker Street"): a street name ending in a street word, and a house number

Person names are not detected: no kept library finds them offline with a measured precision without
an NLP model (Presidio's name recogniser needs spaCy's), see docs/privacy.md.

Each distinct value of a kind gets its own number in order of appearance, so one text keeps its shape:
"<EMAIL_1> wrote to <EMAIL_2>, then <EMAIL_1> again". Overlapping finds keep the earliest, then the
longest. The stored chunk, what LibreChat's model reads and what `/documents` returns are never
redacted: only what goes to a third party (docs/privacy.md).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn

KINDS = ("EMAIL", "PHONE", "IBAN", "CARD", "IPV4", "IPV6", "ADDRESS")
# what log lines lose: personal data only. A server's address or a street in a log line is what an
# operator reads it for ("database at 10.0.0.5 refused"), and no log line quotes a document
LOG_KINDS = ("EMAIL", "PHONE", "IBAN", "CARD")
# where redaction may apply (PII_REDACT): each text bound for one of them is redacted on its way
DESTINATIONS = ("embeddings", "reranker", "contextual", "logs")
# national formats read for numbers without a country code: the deployments this serves are German
# first, and English manuals quote North American numbers; each region is one more matcher pass
DEFAULT_REGIONS = ("DE", "US")

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}(?![\w-])")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]|\.\d)")
# candidates only: `ipaddress` decides (a time "12:30" or "a::b" in code is not an address)
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
# street words glued to a name ("Musterstraße", "Lindenallee"): only those no other common word ends in
# ("Faktor", "Editor", "Sektor" end in -tor; "Computer"-like words in none of these)
_STREET_WORDS_DE = (
    r"stra(?:ß|ss)e|str\.|weg|gasse|allee|platz|ring|damm|ufer|chaussee|steig|pfad|zeile|promenade"
)
# "Musterstraße 12", "Berliner Straße 5a", "Am Ring 3", each with an optional ", 12345 Ort"; a house
# number starts with 1-9 and is no decimal ("Faktor 0.98")
_ADDRESS_DE = re.compile(
    r"(?<![\wÄÖÜäöüß])(?:(?:[A-ZÄÖÜ][\wäöüß-]*(?:" + _STREET_WORDS_DE + r"))|"
    r"(?:[A-ZÄÖÜ][\wäöüß-]+ (?:Straße|Strasse|Str\.|Weg|Gasse|Allee|Platz|Ring|Damm|Ufer|Chaussee))|"
    r"(?:(?:Am|An der|Auf dem|Im|In der|Zum|Zur) [A-ZÄÖÜ][\wäöüß-]+))"
    r" [1-9]\d{0,3}(?: ?[a-zA-Z])?(?:(?:-|–)\d{1,4})?(?![.,]\d)"
    r"(?:,? \d{5} [A-ZÄÖÜ][\wäöüß-]+(?: (?:an der|am|im) [A-ZÄÖÜ][\wäöüß-]+)?)?"
    r"(?![\wäöüß])"
)
_ADDRESS_EN = re.compile(
    r"(?<![\w#])\d{1,5} (?:[A-Z][a-z]+ ){1,3}"
    r"(?:Street|St\.|Avenue|Ave\.|Road|Rd\.|Lane|Ln\.|Drive|Dr\.|Boulevard|Blvd\.|Court|Ct\.|Way|Place|Square)"
    r"(?![\w])"
)
_MIN_PHONE_DIGITS = 6
_DATE_OR_DECIMAL = re.compile(r"\d{1,4}\.\d{1,2}\.\d{2,4}|\d+[.,]\d+")
_NANP = re.compile(r"(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}|\d{3}-\d{4}")
# where a phone number may start: "+49", "0049", a trunk "0" at a number's start, or NANP grouping
_PHONE_HINT = re.compile(r"\+\s?\d|(?<![\d.,])0\d|" + _NANP.pattern)


@dataclass(frozen=True)
class Span:
    """One find: its kind, where it is in the text, and the text it covers."""

    kind: str
    start: int
    end: int
    value: str


def _emails(text: str) -> Iterator[Span]:
    for m in _EMAIL.finditer(text):
        yield Span("EMAIL", m.start(), m.end(), m.group())


def _ibans(text: str) -> Iterator[Span]:
    for m in _IBAN.finditer(text):
        if stdnum_iban.is_valid(m.group()):
            yield Span("IBAN", m.start(), m.end(), m.group())


def _cards(text: str) -> Iterator[Span]:
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        # a run of one digit passes Luhn ("0000 0000 0000 0000"); no card number is one
        if 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn.is_valid(digits):
            yield Span("CARD", m.start(), m.end(), m.group())


def _ips(text: str) -> Iterator[Span]:
    for m in _IPV4.finditer(text):
        try:
            address = ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        if not _anonymous(address):
            yield Span("IPV4", m.start(), m.end(), m.group())
    if "::" in text or text.count(":") >= 4:  # the IPv6 pattern only where one can be
        for m in _IPV6.finditer(text):
            value = m.group()
            if value.count(":") < 2 or not any(c.isalnum() for c in value):
                continue
            try:
                address6 = ipaddress.IPv6Address(value)
            except ValueError:
                continue
            if not _anonymous(address6):
                yield Span("IPV6", m.start(), m.end(), value)


def _anonymous(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_loopback or address.is_unspecified or address.is_multicast


def _phones(text: str, regions: tuple[str, ...]) -> Iterator[Span]:
    # the matcher is the costly detector (~0.1-0.2 ms a short line): run it only where a number
    # written as a phone number can start (what `_written_as_phone` keeps anyway)
    if sum(c.isdigit() for c in text) < _MIN_PHONE_DIGITS or not _PHONE_HINT.search(text):
        return
    for region in regions:
        for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID):
            if _written_as_phone(m.raw_string):
                yield Span("PHONE", m.start, m.end, m.raw_string)


def _written_as_phone(raw: str) -> bool:
    """A number in a phone number's notation, not a date, a decimal or a bare run of digits.

    libphonenumber reads "07.04.2025", "31.01875" or "2147483609" as valid numbers; written as a
    phone number, one starts with "+", "00" or a trunk "0", or is grouped the North American way.
    """
    if _DATE_OR_DECIMAL.fullmatch(raw):
        return False
    return raw.startswith(("+", "0")) or bool(_NANP.fullmatch(raw))


def _addresses(text: str) -> Iterator[Span]:
    for pattern in (_ADDRESS_DE, _ADDRESS_EN):
        for m in pattern.finditer(text):
            yield Span("ADDRESS", m.start(), m.end(), m.group())


def _chosen(spans: Iterable[Span]) -> list[Span]:
    """Non-overlapping spans: the earliest first, the longest of those starting together."""
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -(s.end - s.start))):
        if out and span.start < out[-1].end:
            continue
        out.append(span)
    return out


class Redactor:
    """Finds the chosen kinds of personal data and replaces them with numbered placeholders."""

    def __init__(self, kinds: Iterable[str] = KINDS, *, regions: tuple[str, ...] = DEFAULT_REGIONS) -> None:
        self.kinds = frozenset(kinds)
        unknown = self.kinds - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kinds of personal data: {sorted(unknown)}; known: {list(KINDS)}")
        self.regions = regions

    def spans(self, text: str) -> list[Span]:
        """Every find of the chosen kinds, not overlapping, in order."""
        found: list[Span] = []
        kinds = self.kinds
        if "@" in text and "EMAIL" in kinds:
            found.extend(_emails(text))
        if "IBAN" in kinds:
            found.extend(_ibans(text))
        if "CARD" in kinds:
            found.extend(_cards(text))
        if kinds & {"IPV4", "IPV6"}:
            found.extend(s for s in _ips(text) if s.kind in kinds)
        if "ADDRESS" in kinds:
            found.extend(_addresses(text))
        chosen = _chosen(found)
        if "PHONE" in kinds:
            # after the checksummed kinds: an IBAN's or card's digits are not also a phone number
            taken = [(s.start, s.end) for s in chosen]
            phones = [p for p in _phones(text, self.regions) if not _overlaps(p, taken)]
            chosen = _chosen([*chosen, *phones])
        return chosen

    def redact(self, text: str) -> str:
        """`text` with every find replaced by `<KIND_n>` (n per distinct value of the kind)."""
        return self.replace(text, self.spans(text))

    @staticmethod
    def replace(text: str, spans: list[Span]) -> str:
        """`text` with `spans` (from `spans`) replaced by their placeholders."""
        if not spans:
            return text
        numbers: dict[tuple[str, str], int] = {}
        counts: dict[str, int] = {}
        parts: list[str] = []
        at = 0
        for span in spans:
            key = (span.kind, _canonical(span))
            if key not in numbers:
                counts[span.kind] = counts.get(span.kind, 0) + 1
                numbers[key] = counts[span.kind]
            parts.append(text[at : span.start])
            parts.append(f"<{span.kind}_{numbers[key]}>")
            at = span.end
        parts.append(text[at:])
        return "".join(parts)


def _overlaps(span: Span, taken: list[tuple[int, int]]) -> bool:
    return any(span.start < end and start < span.end for start, end in taken)


def _canonical(span: Span) -> str:
    """The value two spellings of one datum share: digits of numbers, lower case of addresses."""
    if span.kind in ("PHONE", "IBAN", "CARD"):
        return re.sub(r"[^0-9A-Za-z]", "", span.value).upper()
    return span.value.lower()
