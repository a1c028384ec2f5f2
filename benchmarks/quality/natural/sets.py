"""The corpus and question files beside this module: their fields, loading and writing back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = (
    "paraphrase",
    "table",
    "identifier",
    "keyword",
    "section",
    "unanswerable-named",
    "unanswerable-topic",
)
UNANSWERABLE = ("unanswerable-named", "unanswerable-topic")
ANSWERABLE = tuple(k for k in KINDS if k not in UNANSWERABLE)
LANGS = ("en", "de")
SPLITS = ("dev", "test")
# the key order of a question line as `--write` stores it; other keys follow in their own order
FIELDS = (
    "id",
    "corpus",
    "lang",
    "kind",
    "split",
    "question",
    "gold_files",
    "gold_location",
    "answer",
    "evidence",
    "absent_terms",
    "note",
    "content_word_ratio",
)
REQUIRED = FIELDS[:11]  # `note` is optional, the ratio is the checker's
INSTALL_HINT = (
    "the corpus {name!r} needs Debian's {package} package ({root} is missing): run "
    "`apt-get update && apt-get install -y {package}` as root"
)


class SetError(ValueError):
    """A corpus or question file that cannot be read at all; the message says which and why."""


@dataclass(frozen=True)
class CorpusSpec:
    """One `<corpus>.corpus.json`."""

    name: str
    language: str
    package: str
    root: Path
    render: str
    files: tuple[str, ...]
    source: Path

    def file_id(self, path: str) -> str:
        """The benchmark's id of a corpus file: `<corpus>:<path>`."""
        return f"{self.name}:{path}"

    def install_hint(self) -> str:
        """What to run when the package is missing."""
        return INSTALL_HINT.format(name=self.name, package=self.package, root=self.root)


@dataclass(frozen=True)
class Line:
    """One line of a question file: its number, the object (None when it is not JSON) and the error."""

    number: int
    raw: dict[str, Any] | None
    error: str = ""


def corpus_names(folder: Path = HERE) -> list[str]:
    """Every corpus with a `<corpus>.corpus.json` in `folder`, sorted."""
    return sorted(p.name.removesuffix(".corpus.json") for p in folder.glob("*.corpus.json"))


def load_corpus(name: str, folder: Path = HERE) -> CorpusSpec:
    """`<name>.corpus.json`; SetError when it is missing or malformed."""
    path = folder / f"{name}.corpus.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SetError(f"{path.name}: no such file") from None
    except ValueError as exc:
        raise SetError(f"{path.name}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise SetError(f"{path.name}: not a JSON object")
    missing = [k for k in ("name", "language", "package", "root", "render", "files") if k not in raw]
    if missing:
        raise SetError(f"{path.name}: missing {', '.join(missing)}")
    files = raw["files"]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise SetError(f"{path.name}: files must be a list of paths")
    for key in ("name", "language", "package", "root", "render"):
        if not isinstance(raw[key], str):
            raise SetError(f"{path.name}: {key} must be a string")
    return CorpusSpec(
        name=raw["name"],
        language=raw["language"],
        package=raw["package"],
        root=Path(raw["root"]),
        render=raw["render"],
        files=tuple(files),
        source=path,
    )


def questions_path(name: str, folder: Path = HERE) -> Path:
    """Where a corpus's questions are."""
    return folder / f"{name}.questions.jsonl"


def load_lines(path: Path) -> list[Line]:
    """Every non-blank line of a questions file (none when the file does not exist yet)."""
    if not path.is_file():
        return []
    out = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            out.append(Line(number, None, f"not JSON ({exc})"))
            continue
        if not isinstance(value, dict):
            out.append(Line(number, None, "not a JSON object"))
            continue
        out.append(Line(number, value))
    return out


def ordered(item: dict[str, Any]) -> dict[str, Any]:
    """The item with the known keys first, in `FIELDS` order."""
    head = {k: item[k] for k in FIELDS if k in item}
    return {**head, **{k: v for k, v in item.items() if k not in head}}


def dump_line(item: dict[str, Any]) -> str:
    """One question as its line (stable key order, UTF-8 kept)."""
    return json.dumps(ordered(item), ensure_ascii=False)


def write_ratios(path: Path, ratios: dict[int, float | None]) -> bool:
    """Set (or, for None, drop) `content_word_ratio` on the given line numbers; True when the file
    changed. Lines that are not JSON objects, and blank lines, are kept as they are."""
    lines = path.read_text(encoding="utf-8").splitlines()
    changed = False
    for number, ratio in ratios.items():
        text = lines[number - 1]
        item = json.loads(text)
        if ratio is None:
            item.pop("content_word_ratio", None)
        else:
            item["content_word_ratio"] = ratio
        new = dump_line(item)
        if new != text:
            lines[number - 1] = new
            changed = True
    if changed:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(path)
    return changed
