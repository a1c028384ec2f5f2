"""Entities and document metadata, domain-neutral: every pattern and list is a parameter.

    extractor = EntityExtractor(EntityConfig())
    extractor.extract("DIN EN ISO 13849-1 rates K 28 at 1,5 mm", language="de")
      -> standard "DIN EN ISO 13849-1", identifier "K 28", quantity 1.5 mm

Kinds: `identifier` (tokens mixing letters, digits, `_`, `-`, `.`; camelCase; an upper-case code
and a number such as "K 28"), `standard` (a standards body and a designation), `quantity` (a
number with a unit from the unit table: value as a float, unit canonical), `date` (ISO form when
the date is unambiguous), `document_number` and `revision` (after a label such as "Doc. No." or
"Rev."). Spans never overlap: standards, dates, document numbers and revisions, quantities and
identifiers claim text in that order. `normalized` is the key two mentions of the same entity
share (the shared normalisation for names, "1.5 mm" for quantities, "2024-01-05" for dates).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.text.lexicon import STOPWORD_PROFILES
from app.text.normalize import normalize, tokenize

EntityKind = Literal["identifier", "standard", "quantity", "date", "document_number", "revision"]

# alias as written -> canonical unit. Matched case-sensitively first (mW is not MW); an alias whose
# lower-case form maps to one canonical unit only is also accepted in any case ("10 MM", "5 KG").
DEFAULT_UNITS: dict[str, str] = {
    **{u: u for u in ("nm", "mm", "cm", "dm", "m", "km", "ft", "yd", "mi")},
    **{"µm": "µm", "μm": "µm", "um": "µm", "inch": "in", "inches": "in", "in.": "in"},
    **{u: u for u in ("mg", "g", "kg", "t", "lb", "oz")},
    **{"lbs": "lb", "ml": "ml", "mL": "ml", "l": "l", "L": "l", "dl": "dl", "cl": "cl", "gal": "gal"},
    **{"m³": "m³", "m3": "m³", "cm³": "cm³", "cm3": "cm³"},
    **{"mm²": "mm²", "mm2": "mm²", "m²": "m²", "m2": "m²"},
    **{u: u for u in ("ns", "ms", "s", "min", "h", "d")},
    **{"seconds": "s", "minutes": "min", "hours": "h", "days": "d", "Sekunden": "s", "Minuten": "min"},
    **{"Stunden": "h", "Tage": "d"},
    **{"µs": "µs", "μs": "µs", "us": "µs", "sec": "s", "hrs": "h", "hr": "h", "Std.": "h"},
    **{u: u for u in ("Hz", "kHz", "MHz", "GHz", "rpm")},
    **{"1/min": "rpm", "U/min": "rpm", "min⁻¹": "rpm", "min-1": "rpm"},
    **{u: u for u in ("V", "mV", "kV", "A", "mA", "kA", "W", "mW", "kW", "MW", "GW", "Wh", "kWh", "MWh")},
    **{u: u for u in ("Ah", "mAh", "VA", "kVA", "F", "mF", "nF", "pF")},
    **{"µA": "µA", "μA": "µA", "µF": "µF", "μF": "µF", "Ω": "Ω", "ohm": "Ω", "Ohm": "Ω"},
    **{"kΩ": "kΩ", "kOhm": "kΩ", "MΩ": "MΩ", "MOhm": "MΩ"},
    **{u: u for u in ("Pa", "kPa", "MPa", "GPa", "bar", "mbar", "psi", "N", "kN", "Nm")},
    **{"N·m": "Nm", "N/mm²": "N/mm²", "N/mm2": "N/mm²", "hPa": "hPa"},
    **{"°C": "°C", "℃": "°C", "°F": "°F", "K": "K", "°": "°", "deg": "°", "rad": "rad"},
    **{u: u for u in ("kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "bit")},
    **{"KB": "kB", "bps": "bit/s", "kbit/s": "kbit/s", "Mbit/s": "Mbit/s", "Gbit/s": "Gbit/s"},
    **{"Mbps": "Mbit/s", "Gbps": "Gbit/s", "kbps": "kbit/s"},
    **{"%": "%", "‰": "‰", "ppm": "ppm", "dB": "dB", "dBA": "dB(A)", "dB(A)": "dB(A)"},
    **{"m/s": "m/s", "km/h": "km/h", "mph": "mph", "lm": "lm", "lx": "lx", "cd": "cd", "mol": "mol"},
}

DEFAULT_STANDARD_BODIES: tuple[str, ...] = (
    "ISO", "IEC", "EN", "DIN", "ASTM", "ANSI", "IEEE", "BS", "NF", "JIS", "UL", "VDE", "VDI", "ASME",
    "SAE", "ETSI", "ITU-T", "ITU-R", "NEMA", "CSA", "RFC", "CEN", "CENELEC", "ÖNORM", "DVGW", "NFPA",
    "IPC", "JEDEC", "MIL-STD",
)  # fmt: skip

DEFAULT_DOCUMENT_NUMBER_LABELS: tuple[str, ...] = (
    "document no", "document number", "document id", "doc no", "doc id", "drawing no", "drawing number",
    "report no", "report number", "dokument nr", "dokumentnummer", "dok nr", "zeichnungsnummer",
    "zeichnungs nr", "berichtsnummer",
)  # fmt: skip
DEFAULT_REVISION_LABELS: tuple[str, ...] = (
    "revision", "rev", "version", "ver", "edition", "ausgabe", "stand:", "änderungsstand", "revisionsstand",
)  # fmt: skip

DEFAULT_MONTHS: dict[str, int] = {
    **{m: i for i, m in enumerate(("january february march april may june july august september october "
                                   "november december").split(), 1)},
    **{m: i for i, m in enumerate(("januar februar märz april mai juni juli august september oktober "
                                   "november dezember").split(), 1)},
    **{m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)},
    **{"sept": 9, "jän": 1, "mär": 3, "okt": 10, "dez": 12, "maerz": 3},
}  # fmt: skip


_YEAR = re.compile(r"\d{4}")


class EntityConfig(BaseModel):
    """What counts as an entity; every list is configurable (no product names in code)."""

    model_config = ConfigDict(frozen=True)

    units: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_UNITS))
    standard_bodies: tuple[str, ...] = DEFAULT_STANDARD_BODIES
    document_number_labels: tuple[str, ...] = DEFAULT_DOCUMENT_NUMBER_LABELS
    revision_labels: tuple[str, ...] = DEFAULT_REVISION_LABELS
    months: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_MONTHS))
    # extra regular expressions whose matches are identifiers (for example a house part-number form)
    identifier_patterns: tuple[str, ...] = ()
    # "K 28", "DN 50": one to three capitals, a space, a number
    code_with_number: bool = True
    identifier_min_chars: int = Field(2, ge=1)
    # language detection: tokens looked at, stopword hits needed, how much the winner must lead by
    language_sample_tokens: int = Field(2000, ge=10)
    language_min_hits: int = Field(3, ge=1)
    language_min_ratio: float = Field(1.5, ge=1.0)


@dataclass(frozen=True, slots=True)
class Entity:
    """One entity mention; `start`/`end` index the text it was found in."""

    kind: EntityKind
    raw: str
    normalized: str
    start: int
    end: int
    value: float | None = None
    unit: str | None = None


def format_number(value: float) -> str:
    """A float as the shortest plain text ("1.5", "28", "0.001"): the canonical form in keys."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


def parse_number(raw: str, language: str | None = None) -> float | None:
    """The value of a written number: "1,5" (German) = 1.5, "1,000" (English) = 1000, "1.000.000" = 1e6."""
    text = raw.replace(" ", "").replace("\u202f", "").lstrip("+")
    sign = -1.0 if text.startswith(("-", "−")) else 1.0
    text = text.lstrip("-−")
    if not text or not re.fullmatch(r"\d+(?:[.,]\d+)*", text):
        return None
    dots, commas = text.count("."), text.count(",")
    if dots and commas:
        # both: the last one is the decimal separator ("1,234.5" and "1.234,5")
        decimal = "." if text.rfind(".") > text.rfind(",") else ","
        thousands = "," if decimal == "." else "."
        text = text.replace(thousands, "").replace(decimal, ".")
    elif dots > 1 or commas > 1:
        # repeated separator: thousands grouping ("1.000.000", "1,000,000")
        text = text.replace(".", "").replace(",", "")
    elif commas == 1:
        head, tail = text.split(",")
        is_grouping = language != "de" and len(tail) == 3 and head != "0"
        text = head + tail if is_grouping else f"{head}.{tail}"
    elif dots == 1:
        head, tail = text.split(".")
        is_grouping = language == "de" and len(tail) == 3 and head != "0"
        text = head + tail if is_grouping else text
    try:
        value = sign * float(text)
    except ValueError:  # pragma: no cover - the fullmatch above admits only digits and separators
        return None
    return value if math.isfinite(value) else None


class EntityExtractor:
    """Compiled patterns for one `EntityConfig`; `extract` is a pure function of text and language."""

    def __init__(self, config: EntityConfig | None = None) -> None:
        self.config = config or EntityConfig()
        cfg = self.config
        self._units = dict(cfg.units)
        lower: dict[str, set[str]] = {}
        for alias, canonical in self._units.items():
            lower.setdefault(alias.casefold(), set()).add(canonical)
        # case-insensitive fallback only where it cannot change meaning (mW/MW, nm/Nm stay exact)
        self._units_ci = {
            alias: next(iter(canonicals))
            for alias, canonicals in lower.items()
            if len(canonicals) == 1 and len(alias) >= 2
        }
        aliases = sorted(set(self._units) | set(self._units_ci), key=len, reverse=True)
        unit_alt = "|".join(re.escape(a) for a in aliases)
        number = r"[-−+]?\d+(?:[.,]\d+)*"
        # a unit ends where no letter or digit follows ("5 m" but not "5 months"); symbols end anyway
        unit = rf"(?P<unit>{unit_alt})(?![^\W_])"
        self._quantity = re.compile(
            rf"(?<![\w.,])(?P<num>{number})(?:\s?(?:[-–—]|to|bis|\.\.\.|…)\s?(?P<num2>{number}))?"
            rf"\s?{unit}",
            re.IGNORECASE,
        )
        ordered = sorted(cfg.standard_bodies, key=len, reverse=True)
        bodies = "|".join(re.escape(b).replace(r"\ ", r"\s") for b in ordered)
        self._standard = re.compile(
            rf"(?<![\w-])(?:{bodies})(?:\s?[/ ]\s?(?:{bodies}))*[\s-]?"
            r"(?:[A-Z]{1,2}[\s.]?)?\d+(?:[-.]\d+)*(?::\d{4})?(?![\w])"
        )
        self._doc_number = self._labelled(cfg.document_number_labels, r"[A-Za-z0-9][A-Za-z0-9._/-]*")
        self._revision = self._labelled(cfg.revision_labels, r"[A-Za-z0-9][A-Za-z0-9._/-]{0,15}")
        months = "|".join(re.escape(m) for m in sorted(cfg.months, key=len, reverse=True))
        self._months = {m.casefold(): n for m, n in cfg.months.items()}
        self._dates = [
            ("ymd", re.compile(r"(?<![\d.])(\d{4})-(\d{1,2})-(\d{1,2})(?![\d])")),
            ("dmy", re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?![\d])")),
            ("slash", re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])")),
            ("d_month_y", re.compile(rf"(?<!\w)(\d{{1,2}})\.?\s({months})\.?\s(\d{{4}})(?!\d)", re.I)),
            ("month_d_y", re.compile(rf"(?<!\w)({months})\.?\s(\d{{1,2}}),?\s(\d{{4}})(?!\d)", re.I)),
            ("month_y", re.compile(rf"(?<!\w)({months})\.?\s(\d{{4}})(?!\d)", re.I)),
        ]
        self._token = re.compile(r"(?<![\w.\-])[^\W_](?:[\w.\-]*[^\W_])?(?![\w\-]|\.\w)")
        self._code = re.compile(r"(?<![\w\-])[A-Z]{1,3}\s\d{1,6}(?![\w]|[.,]\d)")
        self._extra = [re.compile(p) for p in cfg.identifier_patterns]

    @staticmethod
    def _labelled(labels: Iterable[str], value: str) -> re.Pattern[str]:
        # "doc no" also matches "Doc. No.", "Doc-No" and "DOC NO:"; the value follows `:`, `#` or space
        alternatives = []
        for label in sorted(labels, key=len, reverse=True):
            words = [re.escape(w) for w in label.split()]
            alternatives.append(r"[\s.\-]*".join(words))
        label = "|".join(alternatives)
        # the label ends at a word boundary ("rev" is not the start of "review")
        return re.compile(
            rf"(?<!\w)(?:{label})(?:(?<=\W)|\b)\.?[\s:#.]*(?:no\.?\s*)?(?P<value>{value})", re.IGNORECASE
        )

    def extract(self, text: str, language: str | None = None) -> list[Entity]:
        """Every entity in `text`, in reading order, spans never overlapping."""
        taken: list[tuple[int, int]] = []
        found: list[Entity] = []

        def free(start: int, end: int) -> bool:
            return all(end <= a or start >= b for a, b in taken)

        def add(entity: Entity) -> None:
            taken.append((entity.start, entity.end))
            found.append(entity)

        for match in self._standard.finditer(text):
            if free(*match.span()):
                raw = match.group(0).strip()
                add(Entity("standard", raw, normalize(raw), match.start(), match.start() + len(raw)))
        for entity in self._find_dates(text, language):
            if free(entity.start, entity.end):
                add(entity)
        for kind, pattern in (("document_number", self._doc_number), ("revision", self._revision)):
            for match in pattern.finditer(text):
                raw = match.group("value").rstrip(".-/")
                start = match.start("value")
                if kind == "revision" and not _revision_like(raw):
                    continue
                if kind == "document_number" and not any(c.isdigit() for c in raw):
                    continue
                if free(start, start + len(raw)):
                    add(Entity(kind, raw, normalize(raw), start, start + len(raw)))  # type: ignore[arg-type]
        for group in self._find_quantities(text, language):
            # a range ("10-20 mm") is two quantities sharing one unit: both or neither
            if group and free(group[0].start, group[-1].end):
                for entity in group:
                    add(entity)
        for entity in self._find_identifiers(text):
            if free(entity.start, entity.end):
                add(entity)
        found.sort(key=lambda e: (e.start, e.end))
        return found

    def unit_of(self, text: str) -> str | None:
        """The canonical unit when `text` is exactly a unit alias ("mm", "N/mm2"), else None."""
        text = text.strip()
        return self._units.get(text) or self._units_ci.get(text.casefold())

    def _find_quantities(self, text: str, language: str | None) -> list[list[Entity]]:
        out: list[list[Entity]] = []
        for match in self._quantity.finditer(text):
            unit = self.unit_of(match.group("unit"))
            if unit is None:  # the case-insensitive regex matched an alias that is exact-case only
                continue
            group: list[Entity] = []
            for name in ("num", "num2"):
                raw_number = match.group(name)
                value = parse_number(raw_number, language) if raw_number else None
                if value is None:
                    continue
                start = match.start(name)
                key = f"{format_number(value)} {unit}"
                raw = text[start : match.end()]
                group.append(Entity("quantity", raw, key, start, match.end(), value=value, unit=unit))
            out.append(group)
        return out

    def _find_dates(self, text: str, language: str | None) -> list[Entity]:
        out: list[Entity] = []
        if not _YEAR.search(text):  # every date form holds a four-digit year: skip the month scans
            return out
        for form, pattern in self._dates:
            for match in pattern.finditer(text):
                iso = self._date_key(form, match.groups(), language)
                if iso is None:
                    continue
                out.append(Entity("date", match.group(0), iso, match.start(), match.end()))
        return out

    def _date_key(self, form: str, groups: tuple[str, ...], language: str | None) -> str | None:
        try:
            if form == "ymd":
                year, month, day = int(groups[0]), int(groups[1]), int(groups[2])
            elif form == "dmy":
                day, month, year = int(groups[0]), int(groups[1]), int(groups[2])
            elif form == "slash":
                first, second, year = int(groups[0]), int(groups[1]), int(groups[2])
                if first > 12 or (language == "de" and second <= 12):
                    day, month = first, second
                elif second > 12 or language == "en":
                    month, day = first, second  # the US order is the English default
                else:
                    return None  # 03/04/2020 in a document of unknown language: ambiguous
            elif form == "d_month_y":
                day, month, year = int(groups[0]), self._months[groups[1].casefold()], int(groups[2])
            elif form == "month_d_y":
                month, day, year = self._months[groups[0].casefold()], int(groups[1]), int(groups[2])
            else:
                month, year = self._months[groups[0].casefold()], int(groups[1])
                dt.date(year, month, 1)
                return f"{year:04d}-{month:02d}"
            return dt.date(year, month, day).isoformat()
        except (ValueError, KeyError):
            return None

    def _find_identifiers(self, text: str) -> list[Entity]:
        out: list[Entity] = []
        min_chars = self.config.identifier_min_chars
        for pattern in self._extra:
            for match in pattern.finditer(text):
                if match.group(0).strip():
                    out.append(self._identifier(match.group(0), match.start()))
        for match in self._token.finditer(text):
            raw = match.group(0)
            if raw.isalpha() and raw[1:].islower():
                continue  # a plain word ("Motor", "the"): most tokens, decided without the full test
            if len(raw) >= min_chars and _identifier_like(raw):
                out.append(self._identifier(raw, match.start()))
        if self.config.code_with_number:
            for match in self._code.finditer(text):
                out.append(self._identifier(match.group(0), match.start()))
        return out

    @staticmethod
    def _identifier(raw: str, start: int) -> Entity:
        return Entity("identifier", raw, normalize(raw), start, start + len(raw))


# a hyphenated word whose last part is a capitalised word: the head noun of a German compound
_COMPOUND_HEAD = re.compile(r"\w-[A-ZÄÖÜ][a-zäöüß]{2,}$")


def _identifier_like(token: str) -> bool:
    """Whether a token names something (a part, a setting, a symbol) rather than being a word."""
    has_letter = any(c.isalpha() for c in token)
    if not has_letter:
        return False  # numbers and dates are other kinds
    if _COMPOUND_HEAD.search(token):
        return False  # a German compound written with hyphens ("Windows-98-Rechner", "Magic-SysRq-Tricks")
    if any(c.isdigit() for c in token) or "_" in token:
        return True
    if re.search(r"[a-z][A-Z]", token):  # camelCase, PostgreSQL
        return True
    parts = [p for p in re.split(r"[.\-]", token) if p]
    if len(parts) < 2:
        return False
    if all(p.isupper() for p in parts) and sum(len(p) for p in parts) >= 3:
        return not all(len(p) == 1 for p in parts)  # B-DETECTION, but not U.S.A
    # dotted names (os.path, config.yaml); "e.g." and "z.B." have one-letter parts
    return "." in token and "-" not in token and all(len(p) >= 2 for p in parts)


def _revision_like(raw: str) -> bool:
    """A revision value is a number ("3", "2.1", "03/2020") or one or two capitals ("C", "AB")."""
    return any(c.isdigit() for c in raw) or bool(re.fullmatch(r"[A-Z]{1,2}", raw))


def detect_language(
    text: str,
    profiles: Mapping[str, frozenset[str]] = STOPWORD_PROFILES,
    *,
    sample_tokens: int = 2000,
    min_hits: int = 3,
    min_ratio: float = 1.5,
) -> str | None:
    """The language whose stopwords dominate `text` ("en", "de", ...), or None when unclear."""
    tokens = tokenize(text[: sample_tokens * 12])[:sample_tokens]
    return language_of_tokens(tokens, profiles, min_hits=min_hits, min_ratio=min_ratio)


def language_of_tokens(
    tokens: Sequence[str],
    profiles: Mapping[str, frozenset[str]] = STOPWORD_PROFILES,
    *,
    min_hits: int = 3,
    min_ratio: float = 1.5,
) -> str | None:
    """`detect_language` of normalised tokens (a chunk's search text, split)."""
    hits = {language: sum(token in words for token in tokens) for language, words in profiles.items()}
    ranked = sorted(hits.items(), key=lambda item: (-item[1], item[0]))
    if not ranked or ranked[0][1] < min_hits:
        return None
    if len(ranked) > 1 and ranked[0][1] < min_ratio * ranked[1][1]:
        return None
    return ranked[0][0]


@functools.cache
def default_extractor() -> EntityExtractor:
    """The extractor of the default configuration, built once."""
    return EntityExtractor()


_HEADER_UNIT = (
    re.compile(r"^(?P<label>.*?)\s*\((?P<unit>[^()]{1,12})\)$"),
    re.compile(r"^(?P<label>.*?)\s*\[(?P<unit>[^\[\]]{1,12})\]$"),
)
_HEADER_IN_UNIT = re.compile(r"^(?P<label>.+?),?\s+(?:in|en)\s+(?P<unit>\S{1,12})$")


def split_header_unit(header: str, extractor: EntityExtractor) -> tuple[str, str | None]:
    """("Length", "mm") for "Length (mm)", "Length [mm]" or "Length in mm"; (header, None) otherwise."""
    text = header.strip()
    for pattern in _HEADER_UNIT:
        match = pattern.match(text)
        if match:
            unit = extractor.unit_of(match.group("unit"))
            if unit is not None:
                return match.group("label").strip() or text, unit
    match = _HEADER_IN_UNIT.match(text)
    if match:
        unit = extractor.unit_of(match.group("unit"))
        if unit is not None:
            return match.group("label").strip(), unit
    return text, None
