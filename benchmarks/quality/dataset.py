"""The benchmark's documents, knowledge bases and queries, and their JSON form."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_FILES_PER_REQUEST = 1000  # the service's (and the overlay's) limit of file ids per search


@dataclass(frozen=True)
class Document:
    """One file to upload: its id, the name it is uploaded under, where its bytes are, which KB."""

    file_id: str
    filename: str
    path: str
    content_type: str
    kb: str
    source: str  # where it came from on this machine (man page file, HTML page)


@dataclass(frozen=True)
class Query:
    """One question with its ground truth."""

    qid: str
    set: str  # report row: man, html-tables, html-identifiers, unanswerable
    kind: str  # how it was made: description, table-cell, identifier, mutated-identifier, ...
    text: str
    kb: str  # the knowledge base it is asked of
    relevant: tuple[str, ...]  # file ids that answer it (empty for unanswerable)
    answer: str | None = None  # text a returned passage should contain, when there is one
    answerable: bool = True
    note: str = ""  # provenance (e.g. the real identifier a mutation came from)


@dataclass
class Chunk:
    """A chunk as the service stored it (from `GET /documents`)."""

    file_id: str
    content: str
    digest: str
    page: int | None = None


@dataclass
class Corpus:
    """Documents grouped into knowledge bases (Agent ids), and the queries asked of them."""

    documents: list[Document] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # sampling figures for the report

    def kbs(self) -> dict[str, list[str]]:
        """KB -> its file ids, in document order."""
        out: dict[str, list[str]] = {}
        for doc in self.documents:
            out.setdefault(doc.kb, []).append(doc.file_id)
        return out

    def fingerprint(self) -> str:
        """A short hash of every document's id, KB and bytes: equal corpora share a service folder."""
        digest = hashlib.sha256()
        for doc in sorted(self.documents, key=lambda d: d.file_id):
            digest.update(f"{doc.file_id}\0{doc.kb}\0{doc.filename}\0".encode())
            digest.update(hashlib.sha256(Path(doc.path).read_bytes()).digest())
        return digest.hexdigest()[:16]


def chunk_key(file_id: str, digest: str) -> tuple[str, str]:
    """The identity of a chunk across systems: its file and the MD5 of its text (rag_api's digest)."""
    return (file_id, digest)


def save_json(path: Path, value: Any) -> None:
    """Write JSON atomically (temp file, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=1, default=_default))
    tmp.replace(path)


def _default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
