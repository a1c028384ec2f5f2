"""A deterministic synthetic corpus in rag_api's row format: files, texts, topics and vectors.

Vectors have the structure of real ones. A topic's centre is built from local-model embeddings of
texts about it: its keyword list, a description, and the benchmark's own questions about it - so, as
in a real knowledge base, every question has passages about its subject near it. A file leans one
way inside its topic, a chunk touches a random second topic to a random degree, and a chunk is
`normalise(centre + w * other_centre + ALPHA * file_direction + BETA * noise)`, w ~ U(0, MIX).
Queries are the local-model embeddings of those questions (the server computes the same vectors).

Why the questions are folded into the centres: without them a generated question sits at cosine
~0.4 from its topic and its nearest chunks are scattered over many topics; on that geometry
pgvector's HNSW walk misses every true neighbour for a good share of queries (recall 0.65 at
ef_search 100 on 200k rows, unfiltered), which is not how real questions over real documents
behave. With them, a question's nearest chunks are a coherent region at distance ~0.3-0.45.

Texts are made of real English words (the local model's WordPiece vocabulary, roughly in frequency
order) with Zipf frequencies, so their size and pglz compressibility - which decide TOAST
placement - look like real chunks.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

NAMESPACE_A = "bench-user-a"  # a LibreChat user: the caller of most scenarios
NAMESPACE_B = "agent_bench_b"  # an agent's namespace, read through `entity_id`
DIM = 384
FORMAT_VERSION = 2  # bump when generation changes, so `--reuse` rebuilds stale data

ALPHA = 0.45  # weight of the file's own direction inside its topic
BETA = 0.55  # weight of per-chunk noise
OFF_TOPIC = 0.15  # share of a file's chunks about another topic
MIX = 0.6  # a chunk's weight on a random second topic is uniform in [0, MIX]
KEYWORDS_PER_TOPIC = 10
POOL_SENTENCES = 48  # sentences per topic that documents are assembled from
GENERAL_SENTENCES = 1200
DOC_CHARS = (800, 1200)
FILE_SIZE_SIGMA = 1.0  # lognormal spread of chunks per file
KINDS = ("pdf", "docx", "txt", "md")
KIND_WEIGHTS = (0.45, 0.25, 0.2, 0.1)

_CENTRE_TEMPLATE = "{a} and {b}: an overview of {c}, {d} and the {e} of {f}"
_QUERY_TEMPLATES = (
    "what does the document say about {a} and {b}?",
    "how does {a} affect the {b} of {c}?",
    "summarise the section on {a} {b}",
    "which {a} is used for {b} and {c}?",
    "{a} {b} {c}",
    "explain the difference between {a} and {b}",
    "where is the {a} of the {b} described?",
    "list the {a} requirements for {b}",
)


@dataclass(frozen=True)
class CorpusSpec:
    """The size and seed of a corpus; equal specs give byte-identical corpora."""

    chunks: int
    files: int
    topics: int
    queries: int
    seed: int

    def fingerprint(self) -> str:
        """A short hash of the spec and the generator version, stored next to `--reuse` data."""
        blob = json.dumps(
            {
                **asdict(self),
                "format": FORMAT_VERSION,
                "alpha": ALPHA,
                "beta": BETA,
                "mix": MIX,
                "off_topic": OFF_TOPIC,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Layout:
    """Which files exist, who owns each, how many chunks each has and what it is about."""

    file_ids: list[str]
    owners: list[str]
    sizes: np.ndarray  # chunks per file, int64
    topics: np.ndarray  # main topic per file, int64
    kinds: list[str]
    offsets: np.ndarray  # index of each file's first chunk in load order

    def files_of(self, owner: str) -> list[int]:
        """Indexes of the files `owner` owns, in load order."""
        return [i for i, o in enumerate(self.owners) if o == owner]


def file_sizes(total: int, files: int, rng: np.random.Generator) -> np.ndarray:
    """`files` lognormal sizes (each >= 1) summing to exactly `total`."""
    if files < 1 or total < files:
        raise ValueError("need at least one chunk per file")
    mean = total / files
    mu = math.log(mean) - FILE_SIZE_SIGMA**2 / 2  # so that E[size] = mean
    raw = rng.lognormal(mu, FILE_SIZE_SIGMA, files)
    sizes = np.maximum(1, np.round(raw * (total / raw.sum()))).astype(np.int64)
    diff = int(total - sizes.sum())
    order = np.argsort(-sizes, kind="stable")  # adjust the largest files first
    i = 0
    while diff != 0:
        j = order[i % files]
        if diff > 0:
            sizes[j] += 1
            diff -= 1
        elif sizes[j] > 1:
            sizes[j] -= 1
            diff += 1
        i += 1
    return np.asarray(sizes, dtype=np.int64)


def make_layout(spec: CorpusSpec) -> Layout:
    """Files with random (seeded) ids, owners split half and half, skewed sizes and topics."""
    rng = np.random.default_rng([spec.seed, 1])
    file_ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(spec.files)]
    owner_of = rng.permutation(spec.files) < spec.files // 2
    owners = [NAMESPACE_A if a else NAMESPACE_B for a in owner_of]
    sizes = file_sizes(spec.chunks, spec.files, rng)
    topics = rng.integers(0, spec.topics, spec.files)
    kinds = [KINDS[k] for k in rng.choice(len(KINDS), spec.files, p=KIND_WEIGHTS)]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return Layout(file_ids, owners, sizes, topics, kinds, offsets)


def load_vocabulary() -> list[str]:
    """Whole English words of the local model's tokenizer, in vocabulary (about frequency) order."""
    from app.clients.embeddings.local import tokenizer_file  # reads a file; loads no model

    vocab: dict[str, int] = json.loads(Path(tokenizer_file()).read_text())["model"]["vocab"]
    ordered = sorted(vocab.items(), key=lambda kv: kv[1])
    return [w for w, _ in ordered if w.isascii() and w.isalpha() and len(w) >= 2]


class TextModel:
    """Sentences, documents, topic descriptions and queries from a seeded vocabulary model."""

    def __init__(self, words: Sequence[str], topics: int, seed: int) -> None:
        self.words = np.asarray(words, dtype=object)
        ranks = np.arange(len(words), dtype=np.float64)
        zipf = 1.0 / (ranks + 8.0)
        self.probs = zipf / zipf.sum()
        rng = np.random.default_rng([seed, 2])
        # topic keywords: mid-frequency words, distinct within a topic
        lo, hi = min(800, len(words) // 4), min(14_000, len(words))
        self.keywords = np.stack(
            [rng.choice(np.arange(lo, hi), KEYWORDS_PER_TOPIC, replace=False) for _ in range(topics)]
        )
        self.pools = [self._sentences(rng, POOL_SENTENCES, t) for t in range(topics)]
        self.general = self._sentences(rng, GENERAL_SENTENCES, None)

    def _sentences(self, rng: np.random.Generator, n: int, topic: int | None) -> list[str]:
        lengths = rng.integers(8, 21, n)
        total = int(lengths.sum())
        picks = rng.choice(len(self.words), total, p=self.probs)
        if topic is not None:
            use_kw = rng.random(total) < 0.25
            kws = self.keywords[topic][rng.integers(0, KEYWORDS_PER_TOPIC, total)]
            picks = np.where(use_kw, kws, picks)
        commas = rng.random(total) < 0.07
        out: list[str] = []
        pos = 0
        for length in lengths:
            toks = [self.words[picks[i]] + ("," if commas[i] else "") for i in range(pos, pos + length - 1)]
            toks.append(self.words[picks[pos + length - 1]])
            pos += length
            text = " ".join(toks)
            out.append(text[0].upper() + text[1:] + ".")
        return out

    def document(self, rng: np.random.Generator, topic: int, length: int) -> str:
        """About `length` characters of sentences, mostly from `topic`'s pool."""
        pool = self.pools[topic]
        parts: list[str] = []
        size = -1
        while size < length:
            if rng.random() < 0.15:
                s = self.general[int(rng.integers(0, len(self.general)))]
            else:
                s = pool[int(rng.integers(0, len(pool)))]
            parts.append(s)
            size += len(s) + 1
        text = " ".join(parts)
        cut = text.rfind(" ", 0, length)
        return text[: cut if cut > length * 0.9 else length]

    def _kw(self, topic: int, rng: np.random.Generator, n: int) -> list[str]:
        idx = rng.choice(KEYWORDS_PER_TOPIC, n, replace=False)
        return [str(self.words[self.keywords[topic][i]]) for i in idx]

    def centre_texts(self, topic: int, seed: int) -> list[str]:
        """Two texts about a topic (all its keywords; a description); their mean embedding is its centre."""
        rng = np.random.default_rng([seed, 3, topic])
        every = " ".join(str(self.words[i]) for i in self.keywords[topic])
        a, b, c, d, e, f = self._kw(topic, rng, 6)
        return [every, _CENTRE_TEMPLATE.format(a=a, b=b, c=c, d=d, e=e, f=f)]

    def query_text(self, topic: int, rng: np.random.Generator, n: int) -> str:
        """A user question about `topic` (template `n` modulo the template list)."""
        a, b, c = self._kw(topic, rng, 3)
        return _QUERY_TEMPLATES[n % len(_QUERY_TEMPLATES)].format(a=a, b=b, c=c)


def query_plan(spec: CorpusSpec, text: TextModel) -> tuple[list[str], np.ndarray]:
    """Distinct query texts and their topics (spread over the topics)."""
    rng = np.random.default_rng([spec.seed, 4])
    order = rng.permutation(spec.topics)
    topics = np.array([order[i % spec.topics] for i in range(spec.queries)], dtype=np.int64)
    texts: list[str] = []
    seen: set[str] = set()
    for i, t in enumerate(topics):
        q = text.query_text(int(t), rng, i)
        while q in seen:  # distinct texts: each must be a separate cache entry on the server
            q = text.query_text(int(t), rng, i + 1)
        seen.add(q)
        texts.append(q)
    return texts, topics


def normalise(m: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32)."""
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.asarray(m / np.maximum(norms, 1e-12), dtype=np.float32)


def topic_centres(
    centre_embeddings: np.ndarray, topics: int, query_vectors: np.ndarray, query_topics: np.ndarray
) -> np.ndarray:
    """Unit centre per topic: the sum of its text embeddings (rows grouped by topic) and its questions'."""
    grouped = centre_embeddings.reshape(topics, -1, centre_embeddings.shape[-1]).sum(axis=1)
    np.add.at(grouped, query_topics, query_vectors)
    return normalise(grouped)


class VectorModel:
    """Chunk vectors around topic centres, with a per-file direction and per-chunk noise."""

    def __init__(self, centres: np.ndarray, files: int, seed: int) -> None:
        self.centres = centres
        rng = np.random.default_rng([seed, 5])
        self.file_dirs = normalise(rng.standard_normal((files, centres.shape[1]), dtype=np.float32))

    def chunk_vectors(self, rng: np.random.Generator, file_idx: np.ndarray, topics: np.ndarray) -> np.ndarray:
        """Vectors (n, d) float32 for chunks of `file_idx` about `topics` (plus a bit of another)."""
        n = len(file_idx)
        noise = normalise(rng.standard_normal((n, self.centres.shape[1]), dtype=np.float32))
        second = rng.integers(0, len(self.centres), n)
        weight = rng.uniform(0.0, MIX, n).astype(np.float32)[:, None]
        return normalise(
            self.centres[topics]
            + weight * self.centres[second]
            + ALPHA * self.file_dirs[file_idx]
            + BETA * noise
        )


@dataclass(frozen=True)
class ChunkRow:
    """One row of `langchain_pg_embedding`, minus the collection id."""

    uuid: uuid.UUID
    vector: np.ndarray
    document: str
    cmetadata: str
    custom_id: str


def file_chunks(
    layout: Layout, text: TextModel, vectors: VectorModel, first: int, last: int, seed: int
) -> list[ChunkRow]:
    """Rows of files [first, last), as rag_api v0.9 would have stored them (deterministic per range)."""
    rng = np.random.default_rng([seed, 6, first, last])
    sizes = layout.sizes[first:last]
    n = int(sizes.sum())
    file_idx = np.repeat(np.arange(first, last), sizes)
    topics = layout.topics[file_idx].copy()
    off = rng.random(n) < OFF_TOPIC
    topics[off] = rng.integers(0, len(text.pools), int(off.sum()))
    vecs = vectors.chunk_vectors(rng, file_idx, topics)
    lengths = rng.integers(DOC_CHARS[0], DOC_CHARS[1] + 1, n)
    raw_ids = rng.bytes(16 * n)
    rows: list[ChunkRow] = []
    pos = 0
    for f in range(first, last):
        file_id, owner, kind = layout.file_ids[f], layout.owners[f], layout.kinds[f]
        # rag_api stores the upload's server path as `source`
        source = f"/app/uploads/{owner}/{file_id}-document-{f:05d}.{kind}"
        for c in range(int(layout.sizes[f])):
            doc = text.document(rng, int(topics[pos]), int(lengths[pos]))
            meta: dict[str, object] = {"source": source}
            if kind == "pdf":
                meta["page"] = c // 3
            meta.update(file_id=file_id, user_id=owner, digest=hashlib.md5(doc.encode()).hexdigest())  # noqa: S324
            rows.append(
                ChunkRow(
                    uuid.UUID(bytes=raw_ids[16 * pos : 16 * pos + 16], version=4),
                    vecs[pos],
                    doc,
                    json.dumps(meta),
                    file_id,
                )
            )
            pos += 1
    return rows


def batches(layout: Layout, target_rows: int) -> list[tuple[int, int]]:
    """File ranges [first, last) of about `target_rows` chunks each, in load order."""
    out: list[tuple[int, int]] = []
    first, rows = 0, 0
    for f, size in enumerate(layout.sizes):
        rows += int(size)
        if rows >= target_rows:
            out.append((first, f + 1))
            first, rows = f + 1, 0
    if first < len(layout.sizes):
        out.append((first, len(layout.sizes)))
    return out
