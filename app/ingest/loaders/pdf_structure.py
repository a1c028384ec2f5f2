"""A PDF page's text as blocks: which lines are headings, which are running headers and footers.

    structure = DocumentStructure.build(outline, pages)   # pages: PageLines of every page
    page_blocks(text, page, structure.rule(page), structure.running)

Headings come from the document's own structure, in this order:
- the outline (bookmarks), when it has one whose titles are found on their pages: a line (or two
  wrapped lines) that reads as an entry of its page is that heading, at the entry's depth;
- else typography: a line set at least 15 % larger than the body text, or bold at body size and
  numbered ("2.1 Scope"), is a heading; its depth is its numbering's, else the rank of its size;
- else (no font information: OCR text) a guess from the words alone.
Code and configuration lines, address lines and numbered list items ("7. Run the script") never
become headings from typography or the guess; a "Chapter 3" label before a heading joins it.

Running headers and footers: a line among the first (or last) two of a page whose text, page
numbers aside, recurs at that place on at least 40 % of the pages (and three) is page furniture. It
becomes a `header` / `footer` block, which V2 keeps out of every chunk (and reads for the document
number); V1's page text is unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from app.ingest.types import Block

# A line that is probably a heading: short, no sentence punctuation at its end, and numbered
# ("2.1 Scope"), ALL CAPS, or a Title Case phrase.
_NUMBERED = re.compile(r"^(\d+(?:\.\d+){0,5}|[A-Z](?:\.\d+){1,5})\.?\s+\S")
# "7. Run the script": one number and a period, the way numbered lists are written
_LIST_ITEM = re.compile(r"^(?:\d{1,3}|[a-z])[.)]\s+\S")
_MAX_HEADING_CHARS = 80
_MAX_STYLED_HEADING_CHARS = 160
# Code and configuration: assignments, braces, shell prompts and comments, calls, "key: value".
_CODE = re.compile(r"[=;{}$<>|\\`]|^\s*(?:#|//|--|\$|%)|\w\(|^[\w.-]+\s*:\s*\S|\S+/\S+/\S+\.\w+$")
# Address lines: postcodes with a town, street numbers, phone, mail and web addresses.
_ADDRESS = re.compile(
    r"\b(?:[A-Z]{1,2}-\d{4,5}|\d{5})\s+[A-ZÄÖÜ][a-zäöüß]+|"
    r"(?:stra(?:ß|ss)e|str\.|street|st\.|road|avenue|allee|weg|platz|gasse)\s*\d|"
    r"\b(?:tel|fax|phone|telefon)\b\.?\s*[:+\d(]|\be-?mail\s*:|@|www\.|https?://",
    re.IGNORECASE,
)
_CHAPTER_LABEL = re.compile(r"^(?:chapter|kapitel|appendix|anhang|part|teil)\s+[\dA-Z]{1,4}$", re.IGNORECASE)
# tokens a running header or footer carries besides its text: page numbers, "Page 3 of 10"
_PAGE_TOKENS = re.compile(
    r"^(?:\d+|[ivxlcdm]{1,7}|page|seite|of|von|/|\||-|\u2013|\u2014)$",
    re.IGNORECASE,
)
_RUNNING_SHARE = 0.4
_RUNNING_MIN_PAGES = 3
_RUNNING_DEPTH = 2  # lines from the top and the bottom of a page that can be running lines
_LARGER = 1.15
_OUTLINE_MATCHED = 0.5  # the outline is used when at least this share of its entries is found

HeadingRule = Callable[[str, str | None], int | None]


def line_key(line: str) -> str:
    """A line's letters and digits, case-folded: the same heading from two extractors matches."""
    return "".join(ch for ch in line.casefold() if ch.isalnum())


def _unnumbered(line: str) -> str:
    match = _NUMBERED.match(line.strip())
    return line.strip()[match.end(1) :] if match else line


@dataclass(frozen=True, slots=True)
class OutlineEntry:
    """One bookmark: its title, depth (0 = top) and 0-based page."""

    title: str
    level: int
    page: int


@dataclass(frozen=True, slots=True)
class LineStyle:
    """How a line is set: its font size (points) and whether the font is bold."""

    size: float
    bold: bool


@dataclass(frozen=True, slots=True)
class PageLines:
    """What the document-wide decisions read of one page: its text and the style of its lines."""

    text: str
    styles: dict[str, LineStyle] = field(default_factory=dict)  # by line_key


def is_heading_line(line: str, next_line: str | None) -> bool:
    """Best-effort guess, from the words alone, that a line of PDF text is a heading."""
    line = line.strip()
    if not line or len(line) > _MAX_HEADING_CHARS or next_line is None or not next_line.strip():
        return False
    if line[-1] in ".,;:!?" or not (line[0].isupper() or line[0].isdigit()):
        return False
    if _not_a_heading(line):
        return False
    words = line.split()
    if len(words) > 12:
        return False
    if _NUMBERED.match(line):
        return any(ch.isalpha() for ch in line)
    letters = [ch for ch in line if ch.isalpha()]
    if len(letters) >= 3 and all(ch.isupper() for ch in letters):
        return True
    capitalised = [w for w in words if w[0].isupper() or len(w) <= 3]
    return len(words) >= 2 and len(capitalised) == len(words) and len(line) <= 60


def _not_a_heading(line: str) -> bool:
    """Code or configuration, an address, a numbered list item, or a number that starts a sentence."""
    return bool(_CODE.search(line) or _ADDRESS.search(line) or _LIST_ITEM.match(line) or _runs_on(line))


def _runs_on(line: str) -> bool:
    """True when a line starting with a number goes on in lower case ("2.6 and 3.x kernels")."""
    return _NUMBERED.match(line) is not None and _unnumbered(line).strip()[:1].islower()


def heading_level(line: str) -> int:
    """The depth a heading's numbering gives ("2.1 Scope" is 2), 1 when it has none."""
    numbered = _NUMBERED.match(line.strip())
    return numbered.group(1).count(".") + 1 if numbered else 1


def guess_rule(line: str, next_line: str | None) -> int | None:
    """The heading rule without font information (OCR text)."""
    return heading_level(line) if is_heading_line(line, next_line) else None


class _OutlineRule:
    """Headings of one page: the lines that read as the page's outline entries, in order."""

    def __init__(self, entries: Sequence[OutlineEntry]) -> None:
        self._entries: dict[str, int] = {}
        for entry in entries:
            for key in {line_key(entry.title), line_key(_unnumbered(entry.title))}:
                if key:
                    self._entries.setdefault(key, entry.level + 1)

    def __call__(self, line: str, next_line: str | None) -> int | None:
        key = line_key(line)
        level = self._entries.get(key) or self._entries.get(line_key(_unnumbered(line)))
        return level if key else None

    def wrapped(self, line: str, next_line: str) -> int | None:
        """The level when `line` and `next_line` together read as an entry (a wrapped title)."""
        return self(f"{line} {next_line}", None)


class _TypographyRule:
    """Headings by size and weight against the body text's size."""

    def __init__(self, styles: dict[str, LineStyle], body: float, ranks: dict[float, int]) -> None:
        self._styles = styles
        self._body = body
        self._ranks = ranks

    def __call__(self, line: str, next_line: str | None) -> int | None:
        style = self._styles.get(line_key(line))
        text = line.strip()
        if (
            style is None
            or not text
            or len(text) > _MAX_STYLED_HEADING_CHARS
            or not any(c.isalpha() for c in text)
        ):
            return None
        larger = style.size >= self._body * _LARGER
        numbered = _NUMBERED.match(text) is not None
        if not larger and not (style.bold and numbered and style.size >= self._body * 0.95):
            return None
        # set larger than the body, code is a heading about a command ("The "$PATH" variable");
        # at body size only the words can tell a heading from a line of code or a list
        if _ADDRESS.search(text) or (not larger and _not_a_heading(text)):
            return None
        if text[-1] in ",;" or (text[-1] == "." and not numbered):
            return None
        if numbered:
            return heading_level(text)
        return self._ranks.get(round(style.size * 2) / 2, len(self._ranks) + 1)

    def continues(self, line: str, following: str) -> bool:
        """True when `following` is the second line of the heading `line`: the same larger style,
        and not numbered (the next heading would be)."""
        first, second = self._styles.get(line_key(line)), self._styles.get(line_key(following))
        return (
            first is not None
            and first == second
            and first.size >= self._body * _LARGER
            and not _NUMBERED.match(following.strip())
        )


@dataclass(frozen=True)
class RunningLines:
    """The keys of running headers (top of the page) and footers (bottom)."""

    top: frozenset[str] = frozenset()
    bottom: frozenset[str] = frozenset()

    def split(self, lines: list[str]) -> tuple[list[str], list[str], list[str]]:
        """(header lines, body lines, footer lines) of a page's (or a region's) lines."""
        head: list[str] = []
        body = list(lines)
        while body and len(head) < _RUNNING_DEPTH and _running_key(body[0]) in self.top:
            head.append(body.pop(0))
        foot: list[str] = []
        while body and len(foot) < _RUNNING_DEPTH and _running_key(body[-1]) in self.bottom:
            foot.insert(0, body.pop())
        return head, body, foot


def _running_key(line: str) -> str | None:
    """A line's text with its page-number tokens left out; None for a blank or long line."""
    words = line.split()
    if not words or len(line) > 120:
        return None
    while words and _PAGE_TOKENS.match(words[0]):
        words.pop(0)
    while words and _PAGE_TOKENS.match(words[-1]):
        words.pop()
    if not words:
        return "#" if len(line.strip()) <= 20 else None  # a page number alone
    return " ".join(words).casefold()


def running_lines(texts: Sequence[str]) -> RunningLines:
    """The running headers and footers of a document, from the text of each page."""
    top: Counter[str] = Counter()
    bottom: Counter[str] = Counter()
    pages = 0
    for text in texts:
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            continue
        pages += 1
        top.update({k for line in lines[:_RUNNING_DEPTH] if (k := _running_key(line))})
        bottom.update({k for line in lines[-_RUNNING_DEPTH:] if (k := _running_key(line))})
    needed = max(_RUNNING_MIN_PAGES, _RUNNING_SHARE * pages)
    return RunningLines(
        frozenset(k for k, n in top.items() if n >= needed),
        frozenset(k for k, n in bottom.items() if n >= needed),
    )


@dataclass
class DocumentStructure:
    """The document-wide decisions: running lines, and where each page's headings come from."""

    running: RunningLines
    source: str  # "outline", "typography" or "guess"
    _outline: dict[int, list[OutlineEntry]] = field(default_factory=dict)
    _typography: tuple[float, dict[float, int]] | None = None
    _styles: list[dict[str, LineStyle]] = field(default_factory=list)

    @classmethod
    def build(cls, outline: Sequence[OutlineEntry], pages: Sequence[PageLines]) -> DocumentStructure:
        """Decide from the outline and every page's lines (see the module docstring)."""
        running = running_lines([p.text for p in pages])
        by_page: dict[int, list[OutlineEntry]] = {}
        for entry in outline:
            if 0 <= entry.page < len(pages):
                by_page.setdefault(entry.page, []).append(entry)
        if outline and _outline_found(by_page, pages) >= _OUTLINE_MATCHED * len(outline):
            return cls(running, "outline", _outline=by_page)
        styles = [p.styles for p in pages]
        typography = _body_and_ranks(styles)
        if typography is not None:
            return cls(running, "typography", _typography=typography, _styles=styles)
        return cls(running, "guess")

    def rule(self, page: int) -> HeadingRule:
        """The heading rule of one page."""
        if self.source == "outline":
            return _OutlineRule(self._outline.get(page, []))
        if self._typography is not None and page < len(self._styles):
            body, ranks = self._typography
            return _TypographyRule(self._styles[page], body, ranks)
        return guess_rule


def _outline_found(by_page: dict[int, list[OutlineEntry]], pages: Sequence[PageLines]) -> int:
    """How many outline entries read as a line (or two) of their page."""
    found = 0
    for page, entries in by_page.items():
        lines = [line_key(line) for line in pages[page].text.split("\n")]
        keys = set(lines) | {a + b for a, b in pairwise(lines)}
        keys |= {line_key(_unnumbered(line)) for line in pages[page].text.split("\n")}
        found += sum(
            1 for e in entries if line_key(e.title) in keys or line_key(_unnumbered(e.title)) in keys
        )
    return found


def _body_and_ranks(styles: Sequence[dict[str, LineStyle]]) -> tuple[float, dict[float, int]] | None:
    """The body text's size (the size most text is set in) and the rank of each larger size; None
    when the document sets no line apart (one size, no bold): its typography tells nothing."""
    weight: Counter[float] = Counter()
    bold = False
    for page in styles:
        for key, style in page.items():
            weight[round(style.size * 2) / 2] += len(key)
            bold = bold or style.bold
    if not weight:
        return None
    body = weight.most_common(1)[0][0]
    larger = sorted((s for s in weight if s >= body * _LARGER), reverse=True)
    if not larger and not bold:
        return None
    return body, {size: rank + 1 for rank, size in enumerate(larger)}


def page_blocks(
    text: str, page: int, rule: HeadingRule = guess_rule, running: RunningLines | None = None
) -> list[Block]:
    """A page's text as paragraphs, headings (by `rule`) and running header/footer blocks."""
    head, lines, foot = (running or RunningLines()).split(text.split("\n"))
    blocks = [Block(kind="paragraph", text=line.strip(), page=page, boilerplate="header") for line in head]
    paragraph: list[str] = []

    def flush() -> None:
        body = "\n".join(paragraph).strip()
        if body:
            blocks.append(Block(kind="paragraph", text=body, page=page))
        paragraph.clear()

    position = 0
    while position < len(lines):
        line = lines[position]
        heading, used = _heading_at(lines, position, rule)
        # a guessed heading must start a paragraph or follow a finished sentence
        guessed = rule is guess_rule and paragraph and paragraph[-1].rstrip()[-1:] not in ".:!?"
        if not line.strip():
            flush()
        elif heading is not None and not guessed:
            flush()
            blocks.append(Block(kind="heading", text=heading[1], page=page, level=heading[0]))
            position += used
            continue
        else:
            paragraph.append(line)
        position += 1
    flush()
    blocks.extend(
        Block(kind="paragraph", text=line.strip(), page=page, boilerplate="footer") for line in foot
    )
    return blocks


def _heading_at(lines: list[str], position: int, rule: HeadingRule) -> tuple[tuple[int, str] | None, int]:
    """The heading (level, text) starting at `position` and how many lines it takes, or (None, 1)."""
    line = lines[position].strip()
    following = lines[position + 1].strip() if position + 1 < len(lines) else None
    if not line:
        return None, 1
    if _CHAPTER_LABEL.match(line) and following:
        # "Chapter 3" on a line of its own, then the chapter's title: one heading
        level = rule(following, lines[position + 2] if position + 2 < len(lines) else None)
        if level is not None:
            return (level, following), 2
    level = rule(line, following)
    if (
        level is not None
        and following
        and isinstance(rule, _TypographyRule)
        and rule.continues(line, following)
    ):
        return (level, f"{line} {following}"), 2  # a heading set on two lines
    if level is not None:
        return (level, line), 1
    if following and isinstance(rule, _OutlineRule):
        level = rule.wrapped(line, following)
        if level is not None:
            return (level, f"{line} {following}"), 2
    return None, 1
