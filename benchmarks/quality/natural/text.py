"""Text as a reader sees it, and the words of a question: rendering, collapsing, content words.

- HTML: the visible text of `<body>` (selectolax), `script`/`style`/`noscript`/`template` dropped and
  Sphinx's hover-only pilcrow links too; block elements (paragraphs, cells, list items, headings, line
  breaks) are separated by a line break, inline markup (`<code>`, `<em>`, links) joins its text with
  no separator, as a browser shows it.
- man: `manpages.render` (`man --nh --nj -l FILE | col -b`, LC_ALL=C.UTF-8, MANWIDTH=80): no
  hyphenation and no justification, so words stay whole and only the spacing differs from a
  terminal's, which collapsing removes.
Comparisons are on `collapse(text)`: every run of whitespace (non-breaking spaces too) is one space.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser

from benchmarks.quality import manpages

RENDERERS = ("html", "man")
# bumped when a renderer changes, so cached texts of the old renderer are not read again
RENDER_VERSION = "1"
_SPACE = re.compile(r"\s+")
_HIDDEN = "script, style, noscript, template, a.headerlink"
_BLOCKS = (
    "address, article, aside, blockquote, br, caption, dd, details, div, dl, dt, fieldset, figcaption, "
    "figure, footer, form, h1, h2, h3, h4, h5, h6, header, hr, li, main, nav, ol, p, pre, section, "
    "summary, table, tbody, td, tfoot, th, thead, tr, ul"
)


def collapse(text: str) -> str:
    """Every run of whitespace as one space, none at either end."""
    return _SPACE.sub(" ", text).strip()


def html_text(markup: str) -> str:
    """The visible text of an HTML page's body, blocks on their own lines."""
    tree = LexborHTMLParser(markup)
    root = tree.body or tree.root
    if root is None:
        return ""
    for node in root.css(_HIDDEN):
        node.decompose()
    for node in root.css(_BLOCKS):
        # a line break on each side: "<td>a</td><td>b</td>" reads "a b", never "ab"
        node.insert_before("\n")
        node.insert_after("\n")
    return root.text(deep=True, separator="")


def render_file(path: Path, render: str) -> str:
    """A corpus file's text as its reader sees it (`render`: html or man)."""
    if render == "html":
        return html_text(path.read_text(encoding="utf-8", errors="replace"))
    if render == "man":
        return manpages.render(path)
    raise ValueError(f"unknown render {render!r} (one of {', '.join(RENDERERS)})")


class TextCache:
    """Rendered texts on disk, keyed by path, size, mtime, renderer and its version."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _target(self, path: Path, render: str) -> Path:
        st = path.stat()
        key = f"{RENDER_VERSION}\0{render}\0{path}\0{st.st_size}\0{st.st_mtime_ns}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.folder / digest[:2] / f"{digest}.txt"

    def get(self, path: Path, render: str) -> str:
        """The rendered text (rendered now and stored when not cached yet)."""
        target = self._target(path, render)
        if target.is_file():
            return target.read_text(encoding="utf-8")
        text = render_file(path, render)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.{id(text)}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
        return text

    def cached_path(self, path: Path, render: str) -> Path:
        """Where the rendered text of `path` is stored (rendered first when missing)."""
        self.get(path, render)
        return self._target(path, render)

    def many(
        self,
        paths: Sequence[Path],
        render: str,
        workers: int = 2,
        say: Callable[[str], None] = lambda _m: None,
    ) -> list[str]:
        """Texts of `paths` in order; uncached ones rendered `workers` at a time (man is slow)."""
        todo = sum(not self._target(p, render).is_file() for p in paths)
        if render == "html" or workers <= 1 or todo == 0:
            return [self.get(p, render) for p in paths]
        say(f"rendering {todo} of {len(paths)} files (cached afterwards)")
        out: list[str] = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for i, text in enumerate(pool.map(lambda p: self.get(p, render), paths), start=1):
                out.append(text)
                if i % 200 == 0:
                    say(f"{i}/{len(paths)} files")
        return out


# ---- content words -----------------------------------------------------------------------------

# function words, question words and the verbs every question uses ("can", "does", "kann", "muss");
# what is left of a question is what it is about
_STOPWORDS_EN = """
a about above after again against all also am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't
down during each either else ever every few for from further get gets getting give given go goes had
hadn't has hasn't have haven't having he her here hers herself him himself his how however i if in
into is isn't it it's its itself just let like made make makes may me might more most much must my
myself need needs neither no nor not now of off on once one only or other ought our ours ourselves out
over own per please rather same shall she should shouldn't since so some such than that that's the
their theirs them themselves then there there's these they this those through thus to too under until
up upon us use used uses using very via want wants was wasn't way we were weren't what what's when
where where's whether which while who whom whose why will with within without won't would wouldn't
yes yet you your yours yourself yourselves anything something nothing everything someone anyone
tell know find show work thing things instead already still even
"""
_STOPWORDS_DE = """
aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes auch auf
aus bei beim bin bis bist bitte da dabei dadurch dafür dagegen daher damit dann daran darauf daraus
darf darin darüber das dass dein deine dem den denn der deren des dessen dich die dies diese diesem
diesen dieser dieses dir doch dort du durch ein eine einem einen einer eines einige einmal er es etwa
etwas euch euer für gegen gibt hab habe haben hast hat hatte hier hin hinter ich ihm ihn ihnen ihr
ihre im immer in ins ist ja jede jedem jeden jeder jedes jetzt kann kannst kein keine keinem keinen
keiner können könnte man manche mehr mein meine mich mir mit muss müssen nach nicht nichts noch nun
nur ob oder ohne sehr sein seine sich sie sind so solche soll sollte sondern sonst um und uns unser
unter viel vom von vor wann war waren warum was weil welche welchem welchen welcher welches wenn wer
werde werden wie wieder will wir wird wo wofür woher wohin womit worauf woran worin wozu wurde würde
zu zum zur über also eigentlich gerne geht gehen machen macht lässt lassen mache bekomme bekommen
finde finden zeigen zeigt sagen welchen
"""
STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset(_STOPWORDS_EN.split()),
    "de": frozenset(_STOPWORDS_DE.split()),
}
MIN_LETTERS = 3
_EDGE_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")
_LETTER = re.compile(r"[^\W\d_]")


def words(text: str) -> list[str]:
    """Whitespace-separated words, case-folded, punctuation stripped from both ends
    (`os.cpu_count()` stays `os.cpu_count`; `"machine?"` is `machine`)."""
    out = []
    for raw in text.split():
        word = _EDGE_PUNCT.sub("", raw.casefold())
        if word:
            out.append(word)
    return out


def content_words(text: str, lang: str) -> list[str]:
    """The distinct words of `text` with 3+ letters that are not stopwords of `lang`, in order."""
    stop = STOPWORDS[lang]
    seen: set[str] = set()
    out = []
    for word in words(text):
        if word in seen or word in stop or len(_LETTER.findall(word)) < MIN_LETTERS:
            continue
        seen.add(word)
        out.append(word)
    return out


def content_word_ratio(question: str, evidence: str, lang: str) -> float:
    """Share of the question's content words that occur as words of the evidence (0 without any)."""
    mine = content_words(question, lang)
    if not mine:
        return 0.0
    theirs = set(words(evidence))
    return sum(1 for w in mine if w in theirs) / len(mine)


def shared_content_words(question: str, evidence: str, lang: str) -> list[str]:
    """The question's content words that the evidence has too (what to paraphrase away)."""
    theirs = set(words(evidence))
    return [w for w in content_words(question, lang) if w in theirs]


def contains_casefold(haystacks: Iterable[tuple[str, str]], term: str) -> list[str]:
    """The names of the (name, collapsed text) pairs whose text contains `term`, ignoring case."""
    needle = collapse(term).casefold()
    return [name for name, text in haystacks if needle and needle in text.casefold()]
