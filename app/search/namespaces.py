"""Which namespaces get an HNSW index of their own: pure planning, no database.

An Agent's knowledge base lives in its own namespace (`entity_id`). Searching the whole of a large
one through the dimension's global HNSW graph means a filtered walk that meets every other
namespace's rows on the way; a partial index on that namespace's rows alone is walked unfiltered.
The maintenance (app/maintenance/namespace_task.py) builds one for each namespace of at least
`min_rows` chunks of one dimension, the largest first and at most `max_indexes`, and drops it once
the namespace falls below half that (the gap keeps a namespace near the line from being rebuilt
again and again). Every chunk written to an indexed namespace is inserted into both graphs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from app.store.namespace_index import NamespaceSize, namespace_index_name, namespace_walk_name


@dataclass(frozen=True)
class NamespaceWalk:
    """A usable namespace index: its walk function and the namespace's rows when last counted."""

    function: str
    rows: int


@dataclass(frozen=True)
class NamespacePlan:
    """What one maintenance pass does: indexes to build (largest first), to drop, and those kept."""

    build: tuple[NamespaceSize, ...]
    drop: tuple[str, ...]
    keep: tuple[NamespaceSize, ...]


def plan_namespace_indexes(
    collection_id: uuid.UUID,
    sizes: Iterable[NamespaceSize],
    existing: Iterable[str],
    *,
    min_rows: int,
    max_indexes: int,
    max_dims: int,
) -> NamespacePlan:
    """Indexes to build, drop and keep, given the namespaces' sizes and the indexes that exist.

    A namespace is wanted at `min_rows` and kept down to half of it; at most `max_indexes` are
    kept, the largest first; an index whose namespace is gone or too small is dropped.
    """
    have = set(existing)
    ranked = sorted(
        (s for s in sizes if 0 < s.dims <= max_dims and s.owner),
        key=lambda s: (-s.rows, s.owner, s.dims),
    )
    chosen: list[NamespaceSize] = []
    for size in ranked:
        if len(chosen) >= max_indexes:
            break
        name = namespace_index_name(collection_id, size.owner, size.dims)
        floor = min_rows // 2 if name in have else min_rows
        if min_rows > 0 and size.rows >= max(floor, 1):
            chosen.append(size)
    names = {namespace_index_name(collection_id, s.owner, s.dims): s for s in chosen}
    return NamespacePlan(
        build=tuple(s for n, s in names.items() if n not in have),
        drop=tuple(sorted(have - names.keys())),
        keep=tuple(s for n, s in names.items() if n in have),
    )


def usable_walks(
    collection_id: uuid.UUID, sizes: Iterable[NamespaceSize], valid: Iterable[str]
) -> dict[tuple[str, int], NamespaceWalk]:
    """The planner's map (owner, dims) -> walk of the namespaces in `sizes` whose index is valid."""
    valid_names = set(valid)
    return {
        (s.owner, s.dims): NamespaceWalk(namespace_walk_name(s.dims), s.rows)
        for s in sizes
        if namespace_index_name(collection_id, s.owner, s.dims) in valid_names
    }
