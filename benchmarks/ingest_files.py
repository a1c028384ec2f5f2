"""The files `scripts/bench ingest` uploads, written deterministically from a seed (no network).

Prose is drawn from a fixed list of common English words (the tokenizer sees real words, as with a
user's documents), each file from its own seed so no two files share a chunk: the service would
otherwise reuse vectors and skip the embedder. The big upload is a PDF of photos with a paragraph
of text per page (a scanned-and-OCRed report, a brochure): what reaches MAX_UPLOAD_BYTES in real use
and is accepted, where 100 MB of plain text or CSV is refused by PARSE_MAX_CHARS (50 million
characters) long before. `--big-kind text` writes text instead, for the memory of the largest text
the service accepts (choose --big-mb under that limit).
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.documents import make_docx, make_pdf, make_text, make_xlsx

_MIB = 1024 * 1024
WORDS = (
    "the of and to in is was for on that with as by at from it an be this which or are have had not "
    "but were they their has been one all there more when who will would can no if out so said what "
    "up its about into than them only other time new some could these two may first then do any like "
    "my now over such our man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used "
    "take three states himself few house use during without again place american around however home "
    "small found thought went say part once general high upon school every does got united left number "
    "course war until always away something fact though water less public put think almost hand enough "
    "far took head yet government system better set told nothing night end why called find going look "
    "asked later knew point next program city business give group toward young days let room president "
    "side social given present several order national possible rather second face per among form "
    "important often things looked early white case john become large big need four within felt along "
    "children saw best church ever least power development light thing seemed family interest want "
    "members mind country area others done turned although open god service certain kind problem began "
    "different door thus help sense means whole matter perhaps itself york times law human line above "
    "name example action company hands local show whether five history gave today either act feet "
    "across taken past quite anything seen having death week experience body word half really field "
    "am car words already themselves information tell together college shall money period held keep "
    "sure probably free seems real behind cannot miss political air question making office brought "
    "whose special major heard problems federal became study ago moment available known result street "
    "economic boy reason change position south board individual job society areas west close turn love "
    "community true court force full seem wife future age wanted department voice center woman control "
    "common necessary following policy front sometimes girl six clear further land run students provide "
    "feel party able mother music education university child effect level stood military town short "
    "morning total outside rate figure class art century washington north usually plan leave therefore "
    "evidence million sound top black strong hard various says believe type value play surface soon "
    "mean near lines table peace modern tax road red book personal process situation minutes increase "
    "schools idea english alone women gone nor amount doing age started"
).split()


def sentence(rng: random.Random) -> str:
    """A sentence of 8-22 words, capitalised, with a full stop."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 22))]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random, sentences: tuple[int, int] = (3, 7)) -> str:
    """A paragraph of a few sentences."""
    return " ".join(sentence(rng) for _ in range(rng.randint(*sentences)))


def prose(rng: random.Random, chars: int) -> list[str]:
    """Paragraphs until about `chars` characters."""
    out: list[str] = []
    size = 0
    while size < chars:
        out.append(paragraph(rng))
        size += len(out[-1]) + 2
    return out


@dataclass(frozen=True)
class BenchFile:
    """One file to upload: where it is, what a browser would call it, and its kind."""

    path: Path
    content_type: str
    kind: str


def _txt(path: Path, rng: random.Random, chars: int) -> None:
    make_text(path, "\n\n".join(prose(rng, chars)))


def _md(path: Path, rng: random.Random, chars: int) -> None:
    parts: list[str] = [f"# {sentence(rng)[:-1]}"]
    size = 0
    while size < chars:
        parts.append(f"## {' '.join(rng.choice(WORDS) for _ in range(4)).capitalize()}")
        body = [paragraph(rng) for _ in range(rng.randint(2, 4))]
        parts.extend(body)
        parts.append("\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(2, 5))))
        size += sum(len(p) for p in body) + 300
    make_text(path, "\n\n".join(parts) + "\n")


def _pdf(path: Path, rng: random.Random, chars: int) -> None:
    pages, page, size = [], [], 0
    for text in prose(rng, chars):
        page.append(text)
        size += len(text)
        if size >= 2400:  # about one A4 page of 10 pt text
            pages.append("\n\n".join(page))
            page, size = [], 0
    if page:
        pages.append("\n\n".join(page))
    make_pdf(path, pages)


def _docx(path: Path, rng: random.Random, chars: int) -> None:
    items: list[str | tuple[int, str]] = []
    size = 0
    while size < chars:
        items.append((2, " ".join(rng.choice(WORDS) for _ in range(4)).capitalize()))
        for _ in range(rng.randint(2, 5)):
            items.append(paragraph(rng))
            size += len(items[-1])
    make_docx(path, items, title=sentence(rng)[:-1])


def _xlsx(path: Path, rng: random.Random, chars: int) -> None:
    header: list[object] = ["Order", "Customer", "Region", "Product", "Quantity", "Price", "Note"]
    rows: list[list[object]] = [header]
    size = 0
    while size < chars:
        note = sentence(rng)
        rows.append(
            [
                len(rows),
                f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS).capitalize()}",
                rng.choice(("North", "South", "East", "West")),
                rng.choice(WORDS),
                rng.randint(1, 500),
                round(rng.uniform(1, 900), 2),
                note,
            ]
        )
        size += len(note) + 80  # each value under its header name, as the loader renders a row
    make_xlsx(path, {"Orders": rows})


KINDS: dict[str, tuple[str, str, Callable[[Path, random.Random, int], None]]] = {
    "txt": (".txt", "text/plain", _txt),
    "md": (".md", "text/markdown", _md),
    "pdf": (".pdf", "application/pdf", _pdf),
    "docx": (".docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", _docx),
    "xlsx": (".xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", _xlsx),
}


def write_set(folder: Path, per_kind: int, chars: int, seed: int) -> list[BenchFile]:
    """`per_kind` files of every kind, each about `chars` characters of text, kinds interleaved."""
    folder.mkdir(parents=True, exist_ok=True)
    out: list[BenchFile] = []
    for index in range(per_kind):
        for number, (kind, (suffix, ctype, write)) in enumerate(KINDS.items()):
            path = folder / f"{kind}-{index:03d}{suffix}"
            write(path, random.Random(seed * 1000 + index * 10 + number), chars)
            out.append(BenchFile(path, ctype, kind))
    return out


def write_big(folder: Path, kind: str, mib: float, seed: int) -> BenchFile:
    """The big upload: `mib` MiB of a photo PDF (`pdf`) or of plain text (`text`)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    target = int(mib * _MIB)
    if kind == "text":
        path = folder / "big.txt"
        with path.open("w", encoding="utf-8") as out:
            while out.tell() < target:
                out.write(paragraph(rng) + "\n\n")
        return BenchFile(path, "text/plain", "text")
    path = folder / "big.pdf"
    _photo_pdf(path, rng, target)
    return BenchFile(path, "application/pdf", "pdf")


def _photo_pdf(path: Path, rng: random.Random, target: int) -> None:
    """Pages of a paragraph and a photo each (noise: it does not compress) until `target` bytes."""
    from fpdf import FPDF
    from PIL import Image

    side = 700  # 700 x 700 RGB: ~1.4 MiB a page once deflated (noise does not shrink)
    pages = max(1, round(target / (side * side * 3)))
    pdf = FPDF(format="A4")
    pdf.set_auto_page_break(False)
    pdf.set_font("Helvetica", size=10)
    pdf.set_compression(True)
    for _ in range(pages):
        pdf.add_page()
        pdf.set_xy(pdf.l_margin, pdf.t_margin)
        pdf.multi_cell(pdf.w - pdf.l_margin - pdf.r_margin, 4.5, paragraph(rng, (6, 9)))
        picture = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG", compress_level=1)
        pdf.image(buffer, x=pdf.l_margin, y=110, w=150)
    pdf.output(str(path))
