"""How a search runs: the visible-row estimate, the cost rule, the path and the candidate count.

Pure values and functions, no database: the planner reads what the background maintenance learned
(`SearchKnowledge`: catalogue statistics, the vector copy's state, the usable HNSW walks) and
returns a decision; the SQL function receives that decision as named parameters and only carries it
out (plus the exact fallback, which needs the walk's result). Authorisation is never decided here:
every path runs inside the caller's scope in SQL.

A retrieval channel is a SQL function in `app/store/sql/` that takes `p_scope` (and checks rows
with `ragoverlay_in_scope`) and returns the chunk-hit columns, plus one planner function here that
returns its `SearchCall`. `plan_vector_search` is V1's, and V2's vector channel asks it too, with
what an index run holds (app/evidence/query/vectors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from app.config_sections import SearchSettings
from app.search.namespaces import NamespaceWalk
from app.search.vector_cache import ROW_OVERHEAD_BYTES
from app.store.catalogue import CatalogueSnapshot
from app.store.chunks import FileRecord, SearchCall

# rag_api's typical file, until the catalogue says otherwise
DEFAULT_CHUNKS_PER_FILE = 20.0
# pgvector refuses a larger hnsw.ef_search
MAX_EF_SEARCH = 1000
VECTOR_SEARCH_FUNCTION = "ragoverlay_nearest_chunks"

Path = Literal["exact", "index"]


def uploads_by_uploader(delegated: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, set[str]]]:
    """`CatalogueStats.uploads` from `delegated` (file id -> owner -> uploader)."""
    out: dict[str, dict[str, set[str]]] = {}
    for file_id, owners in delegated.items():
        for owner, uploader in owners.items():
            out.setdefault(uploader, {}).setdefault(file_id, set()).add(owner)
    return out


@dataclass(frozen=True)
class Estimates:
    """Rows a scope shows, as far as the catalogue knows: in all, and of each owner listed."""

    total: int
    by_owner: dict[str, int]


@dataclass(frozen=True)
class CatalogueStats:
    """Sizes and dimensions of one collection's files, from the catalogue (`ragoverlay_files`)."""

    files: int = 0
    chunks: int = 0
    uniform_dims: int | None = None  # the single dimension of every catalogued file, if there is one
    # file id -> owner -> chunk count; None when the catalogue is too large to hold per file
    file_chunks: dict[str, dict[str, int]] | None = None
    # file id -> owner -> uploader, for files uploaded into another namespace (an Agent's)
    delegated: dict[str, dict[str, str]] = field(default_factory=dict)
    # the same, by uploader: uploader -> file id -> the owners it uploaded that file into, so a
    # request reads its own caller's uploads without walking every listed file's entry
    uploads: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    # uploader -> every owner it uploaded into (may keep one a later upload by another took over)
    upload_owners: dict[str, set[str]] = field(default_factory=dict)
    # rows in the searched tables (the largest of PostgreSQL's estimates for rag_api's table and the
    # copy); 0 before the first refresh
    table_rows: float = 0.0

    def __post_init__(self) -> None:
        if self.delegated and not self.uploads:  # built from `delegated` alone
            uploads = uploads_by_uploader(self.delegated)
            object.__setattr__(self, "uploads", uploads)
            owners = {uploader: set().union(*files.values()) for uploader, files in uploads.items()}
            object.__setattr__(self, "upload_owners", owners)

    @classmethod
    def from_snapshot(cls, snapshot: CatalogueSnapshot) -> CatalogueStats:
        """The statistics of a catalogue snapshot (read in the background by the maintenance)."""
        file_chunks: dict[str, dict[str, int]] | None = None
        delegated: dict[str, dict[str, str]] = {}
        if snapshot.rows is not None:
            file_chunks = {}
            for row in snapshot.rows:
                file_chunks.setdefault(row.file_id, {})[row.owner] = row.chunks
                if row.uploader and row.uploader != row.owner:
                    delegated.setdefault(row.file_id, {})[row.owner] = row.uploader
        return cls(
            snapshot.files,
            snapshot.chunks,
            snapshot.uniform_dims,
            file_chunks,
            delegated,
            table_rows=snapshot.table_rows,
        )

    def granted(
        self, uploader: str | None, file_ids: Sequence[str], owners: Sequence[str]
    ) -> list[tuple[str, str]]:
        """(owner, file) of the listed files `uploader` put into namespaces `owners` does not name."""
        if not uploader or not (mine := self.uploads.get(uploader)):
            return []
        named = set(owners)
        if named.issuperset(self.upload_owners.get(uploader, ())):
            # the common case: a user asking an Agent's knowledge base it uploaded into, by its id
            return []
        return [
            (owner, file_id)
            for file_id in filter(mine.__contains__, file_ids)
            for owner in mine[file_id]
            if owner not in named
        ]

    @property
    def chunks_per_file(self) -> float:
        """Average chunks per file (DEFAULT_CHUNKS_PER_FILE before anything is known)."""
        return self.chunks / self.files if self.files else DEFAULT_CHUNKS_PER_FILE

    def estimate(self, file_ids: Sequence[str], owners: Sequence[str], uploader: str | None = None) -> int:
        """Rows of `file_ids` the caller can see, as far as the catalogue knows.

        A listed file catalogued only under other owners counts 0 (a knowledge base listed without
        its `entity_id` shows nothing), unless the caller uploaded it; a file the catalogue has not
        seen yet counts the average.
        """
        return self.estimates(file_ids, owners, uploader).total

    def estimates(
        self, file_ids: Sequence[str], owners: Sequence[str], uploader: str | None = None
    ) -> Estimates:
        """`estimate`'s figure and, from the same pass, each owner's own: the rows of `file_ids`
        catalogued under it, plus the average for each file not catalogued yet."""
        average = self.chunks_per_file
        if self.file_chunks is None:
            guess = round(len(file_ids) * average)
            return Estimates(guess, dict.fromkeys(owners, guess))
        # per request, up to 1,000 files, once: the planner asks for the whole scope and for each
        # owner's part (a namespace walk's share); one lookup per file, one sum per owner
        found = list(map(self.file_chunks.get, file_ids))
        catalogued = [by for by in found if by is not None]
        unknown = (len(found) - len(catalogued)) * average
        own = {owner: sum(by.get(owner, 0) for by in catalogued) for owner in dict.fromkeys(owners)}
        total = sum(own.values()) + unknown
        # the caller's uploads into owners outside its scope
        for owner, file_id in self.granted(uploader, file_ids, owners):
            total += self.file_chunks.get(file_id, {}).get(owner, 0)
        return Estimates(round(total), {owner: round(rows + unknown) for owner, rows in own.items()})

    def with_file(self, stored: FileRecord) -> CatalogueStats:
        """These statistics plus (or with a new version of) one stored file."""
        uniform = self.uniform_dims if self.uniform_dims == stored.embedding_dim else None
        if self.files == 0:
            uniform = stored.embedding_dim
        file_chunks = self.file_chunks
        previous = 0
        if file_chunks is not None:
            # replaced in place: requests read the map on the event loop, between awaits
            previous = file_chunks.setdefault(stored.file_id, {}).get(stored.owner, 0)
            file_chunks[stored.file_id][stored.owner] = stored.chunk_count
        if stored.uploader and stored.uploader != stored.owner:
            before = self.delegated.setdefault(stored.file_id, {}).get(stored.owner)
            if before is not None and before != stored.uploader:  # uploaded again by someone else
                self.uploads.get(before, {}).get(stored.file_id, set()).discard(stored.owner)
            self.delegated[stored.file_id][stored.owner] = stored.uploader
            self.uploads.setdefault(stored.uploader, {}).setdefault(stored.file_id, set()).add(stored.owner)
            self.upload_owners.setdefault(stored.uploader, set()).add(stored.owner)
        new_file = previous == 0
        return replace(
            self,
            files=self.files + (1 if new_file else 0),
            chunks=self.chunks + stored.chunk_count - previous,
            uniform_dims=uniform,
            table_rows=self.table_rows + stored.chunk_count - previous,
        )


@dataclass(frozen=True)
class SearchKnowledge:
    """What the planner may rely on: catalogue statistics, the copy, the usable index walks."""

    stats: CatalogueStats = field(default_factory=CatalogueStats)
    use_copy: bool = False  # the compact vector copy holds every row
    walks: Mapping[int, str] = field(default_factory=dict)  # dimension -> its HNSW walk function
    # (owner, dimension) -> the walk of that namespace's own HNSW index (app/search/namespaces.py)
    namespaces: Mapping[tuple[str, int], NamespaceWalk] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorSearchDecision:
    """How one vector search runs; `call()` turns it into the SQL function's named arguments."""

    path: Path
    use_copy: bool
    k: int
    candidates: int  # rows ranked (copy) or collected (walk) before the exact re-rank
    check_dims: bool  # check each row's dimension (rag_api's rows; the copy has a column for it)
    visible_estimate: int
    walk: str | None = None  # the HNSW walk function (index path)
    ef_search: int | None = None
    max_scan_tuples: int | None = None
    in_memory: bool = False  # the exact scan runs on the service's vector cache (else in SQL)
    namespace: str | None = None  # index path: the owner whose own index `walk` walks

    def call(self, query: np.ndarray) -> SearchCall:
        """The SQL call that carries this decision out for `query`."""
        return SearchCall(
            VECTOR_SEARCH_FUNCTION,
            {
                "p_query": query,
                "p_k": self.k,
                "p_path": self.path,
                "p_use_copy": self.use_copy,
                "p_candidates": self.candidates,
                "p_check_dims": self.check_dims,
                "p_walk": self.walk,
                "p_ef_search": self.ef_search,
                "p_max_scan_tuples": self.max_scan_tuples,
                "p_namespace": self.namespace,
            },
        )


def candidate_count(k: int) -> int:
    """Rows ranked before the exact re-rank: 2k + 10 absorbs halfvec rounding and relaxed order."""
    return 2 * k + 10


def index_pays_off(visible: int, table_rows: float, candidates: int, cost_factor: float) -> bool:
    """The cost rule: walk the index only when visible^2 >= factor x table rows x candidates.

    A filtered walk meets about table/visible rows per visible one, so collecting `candidates`
    visible rows costs ~candidates x table/visible steps, against `visible` rows for an exact scan
    (`cost_factor` weighs a step of the walk against a row of the scan; measured with scripts/bench).
    """
    return float(visible) * visible >= cost_factor * max(table_rows, 1.0) * candidates


# What an exact scan costs, in milliseconds (measured with `scripts bench tenants`, 200k chunks, 2
# cores): in PostgreSQL, one index search per listed file and ~1.6 us per visible row; in memory,
# three statements (the visible files, the candidates' re-read) and ~1 us per listed file, the
# matrix product next to nothing. Below the break-even (~900 rows of a few files) one statement wins.
_SQL_MS_PER_FILE = 0.004
_SQL_MS_PER_ROW = 0.0016
_MEMORY_FIXED_MS = 1.4
_MEMORY_MS_PER_FILE = 0.001
# beyond the memory_pays_off break-even (measured at 1M, in process): the memory scan's streaming
# cost per row once a scope outgrows the CPU cache, and a namespace walk over all of its namespace
_MEMORY_MS_PER_ROW = 0.0001
_WALK_MS = 4.0


def memory_pays_off(files: int, visible: int) -> bool:
    """Whether the exact scan is cheaper in memory than in PostgreSQL, by the measured costs above."""
    in_sql = files * _SQL_MS_PER_FILE + visible * _SQL_MS_PER_ROW
    return in_sql > _MEMORY_FIXED_MS + files * _MEMORY_MS_PER_FILE


def choose_namespace(
    *,
    dims: int,
    owners: Sequence[str],
    estimate: int,
    candidates: int,
    knowledge: SearchKnowledge,
    settings: SearchSettings,
    by_owner: Mapping[str, int],
) -> NamespaceChoice | None:
    """The namespace whose own index should answer this search, or None (the global index or a scan).

    Its walk meets that namespace's rows only, so the cost rule weighs the visible rows of that
    namespace against the namespace's size instead of the table's; the scope's other visible rows
    (the caller's own files, its uploads into other namespaces) are scanned exactly beside the walk,
    so they may be at most `exact_max_rows`. Unowned rows are in no namespace: never with legacy reads.
    `by_owner`: each owner's rows of the scope (`CatalogueStats.estimates`).
    """
    if not knowledge.namespaces or settings.legacy_unowned:
        return None
    best: NamespaceChoice | None = None
    for owner in dict.fromkeys(owners):
        walk = knowledge.namespaces.get((owner, dims))
        if walk is None:
            continue
        own = by_owner[owner]
        if (
            estimate - own <= settings.exact_max_rows
            and index_pays_off(own, float(walk.rows), candidates, settings.cost_factor)
            and (best is None or own > best.visible)
        ):
            best = NamespaceChoice(owner, walk.function, own, walk.rows)
    return best


@dataclass(frozen=True)
class NamespaceChoice:
    """A namespace walk for one search: whose, its function, the rows it shows of it, its size."""

    owner: str
    function: str
    visible: int
    rows: int


def walk_beats_memory(files: int, visible: int, choice: NamespaceChoice) -> bool:
    """Whether a namespace walk is clearly cheaper than the exact scan in memory (measured costs).

    The memory scan streams every visible row's float32 values (~0.1 us a row once they outgrow the
    CPU's cache: the whole 27,426-row KB of the 1M corpus took 4.5-5.3 ms in process); a walk over a
    whole namespace took 3-5.5 ms and costs more as the search shows less of it. The exact scan keeps
    the benefit of the doubt (recall 1.0 by construction): the walk must win by half as much again,
    which it does from about 40,000 rows.
    """
    memory_ms = _MEMORY_FIXED_MS + files * _MEMORY_MS_PER_FILE + visible * _MEMORY_MS_PER_ROW
    walk_ms = _WALK_MS * choice.rows / max(choice.visible, 1)
    return walk_ms * 1.5 < memory_ms


def plan_vector_search(
    *,
    dims: int,
    k: int,
    file_ids: Sequence[str],
    owners: Sequence[str],
    uploader: str | None,
    knowledge: SearchKnowledge,
    settings: SearchSettings,
) -> VectorSearchDecision:
    """The path, candidate count and index settings of one vector search over `file_ids`."""
    stats = knowledge.stats
    estimates = stats.estimates(file_ids, owners, uploader)
    estimate = estimates.total
    # rows of one dimension only: skip the per-row check (the database rechecks on a mismatch);
    # unowned legacy rows are not catalogued, so nothing is known of their dimension
    check_dims = stats.uniform_dims != dims or settings.legacy_unowned
    candidates = candidate_count(k)
    # the memory scan needs the copy (its values and revisions) and owned rows only (legacy rows
    # are not tracked), and a scope the cache's budget can hold; up to its limit it beats any walk
    choice = None
    if knowledge.use_copy and estimate > settings.exact_max_rows:
        choice = choose_namespace(
            dims=dims,
            owners=owners,
            estimate=estimate,
            candidates=candidates,
            knowledge=knowledge,
            settings=settings,
            by_owner=estimates.by_owner,
        )
    # in memory, a search the cache cannot answer yet (its namespace loading) runs the database's
    # exact scan: a walk would be faster, but a filtered one misses rows (recall 0.9 measured on a
    # fifth of a namespace), and exactness is what the memory decision promised
    if (
        knowledge.use_copy
        and not settings.legacy_unowned
        and settings.memory_max_rows > 0
        and estimate <= settings.memory_max_rows
        and estimate * memory_row_bytes(dims) <= settings.memory_max_bytes
        and memory_pays_off(len(file_ids), estimate)
        and not (choice is not None and walk_beats_memory(len(file_ids), estimate, choice))
    ):
        return VectorSearchDecision("exact", True, k, candidates, check_dims, estimate, in_memory=True)
    return _in_database(dims, estimate, check_dims, k, choice, knowledge, settings)


def memory_row_bytes(dims: int) -> int:
    """What the vector cache holds per row of `dims` dimensions (float32 values, id, bookkeeping)."""
    return 4 * dims + ROW_OVERHEAD_BYTES


def _in_database(
    dims: int,
    estimate: int,
    check_dims: bool,
    k: int,
    choice: NamespaceChoice | None,
    knowledge: SearchKnowledge,
    settings: SearchSettings,
) -> VectorSearchDecision:
    """The decision for PostgreSQL alone: a namespace walk, the global walk or an exact scan."""
    stats = knowledge.stats
    candidates = candidate_count(k)
    walk = knowledge.walks.get(dims)
    table_rows = max(stats.table_rows, float(stats.chunks))
    namespace = choice.owner if choice is not None else None
    if namespace is not None or (
        knowledge.use_copy
        and walk is not None
        and estimate > settings.exact_max_rows
        and index_pays_off(estimate, table_rows, candidates, settings.cost_factor)
    ):
        return VectorSearchDecision(
            path="index",
            use_copy=True,
            k=k,
            candidates=candidates,
            check_dims=check_dims,
            visible_estimate=estimate,
            walk=choice.function if choice is not None else walk,
            ef_search=min(max(settings.ef_search, candidates), MAX_EF_SEARCH),
            max_scan_tuples=settings.max_scan_tuples,
            namespace=namespace,
        )
    return VectorSearchDecision(
        path="exact",
        use_copy=knowledge.use_copy,
        k=k,
        # without the copy the scan is exact on rag_api's rows: no re-rank, k is enough
        candidates=candidates if knowledge.use_copy else k,
        check_dims=check_dims,
        visible_estimate=estimate,
    )
