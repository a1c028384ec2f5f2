"""/query_v2's one statement over a V2 index run: every channel, the statistics and the found chunks.

    retrieve(conn, scope, run, ask) -> Retrieval              one statement, one round trip
    retrieve_per_channel(conn, scope, run, ask) -> Retrieval  the same statement once per channel

`retrieve` calls ragoverlay_v2_retrieve (app/evidence/store/sql/60_v2_channels.sql), which computes
the visible documents once and runs each channel in its own exception block: a failing channel
comes back with `error` set (the name of asyncpg's exception class for its SQLSTATE) and the others
still answer. What no exception block can catch fails the statement as a whole: the statement
timeout (QUERY_TIMEOUT_MS; one slow channel spends it for all three), a lost connection, an error
outside the channels. Then the caller runs `retrieve_per_channel` on a fresh connection: the same
statement, asked for one channel at a time (nothing to look up for the other two), each with its own
timeout, so that the slow or broken channel fails alone and the answer is degraded, not lost. It
returns what `retrieve` returns on the same data (`tests/integration/test_v2_channels.py`); the
service counts each use (`ragoverlay_v2_retrieve_fallbacks_total`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.evidence.store.calls import named_call
from app.evidence.store.channels import (
    CHANNEL_NAMES,
    ChannelHit,
    ChannelQuery,
    ChannelResult,
    ChunkDetail,
    ExactArgs,
    Key,
    LexicalArgs,
    NearestArgs,
    Retrieval,
    Visible,
    chunk_detail,
    exact_args,
    lexical_args,
    nearest_args,
)
from app.store.scope import Scope, ScopeError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunCheck:
    """The run a query planned with: still the namespace's active one (of `index_version`, None: newest)?"""

    namespace: str
    index_version: str | None
    embedding_model: str
    extractor_version: str


@dataclass(frozen=True, slots=True)
class RetrieveArgs:
    """ragoverlay_v2_retrieve's arguments besides the scope: every channel's part, and the run check."""

    run: int
    limit: int
    exact: ExactArgs
    lexical: LexicalArgs
    nearest: NearestArgs
    check: RunCheck | None  # None: the run is not checked


RETRIEVE_CALL = named_call("ragoverlay_v2_retrieve", RetrieveArgs)
RETRIEVE = f"SELECT * FROM {RETRIEVE_CALL.sql}"

# asyncpg's exception class of each SQLSTATE: a channel failing inside the statement is reported
# by the same name as one failing on its own ("57014" -> "QueryCanceledError")
_SQLSTATE_NAMES: dict[str, str] = {
    str(getattr(cls, "sqlstate", "")): cls.__name__
    for cls in vars(asyncpg.exceptions).values()
    if isinstance(cls, type) and issubclass(cls, asyncpg.PostgresError) and getattr(cls, "sqlstate", None)
}


def _sqlstate_name(code: str) -> str:
    """asyncpg's exception class name for a SQLSTATE."""
    return _SQLSTATE_NAMES.get(code, f"PostgresError {code}")


def retrieve_args(run_id: int, ask: ChannelQuery, check: RunCheck | None = None) -> RetrieveArgs:
    """The statement's arguments for `ask` over run `run_id`."""
    return RetrieveArgs(run_id, ask.limit, exact_args(ask), lexical_args(ask), nearest_args(ask), check)


async def retrieve(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    ask: ChannelQuery,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
    check: RunCheck | None = None,
) -> Retrieval:
    """Every channel, the statistics and the found chunks' details in one statement (module docstring);
    with `check`, nothing is read (`stale`) unless `run_id` is still that active run."""
    scope.for_reading()
    args = retrieve_args(run_id, ask, check)
    return _retrieval(await conn.fetch(RETRIEVE, *RETRIEVE_CALL.bind(args, scope), timeout=timeout))


def _retrieval(rows: Sequence[asyncpg.Record]) -> Retrieval:
    """The statement's rows (four kinds, see ragoverlay_v2_retrieve) as a `Retrieval`."""
    channels = {name: ChannelResult() for name in CHANNEL_NAMES}
    details: dict[Key, ChunkDetail] = {}
    parsed: dict[int, Any] = {}  # document metadata by document id: sent and decoded once per document
    frequencies: dict[str, int] = {}
    visible_stats = Visible(0, 0, 0.0)
    stages: dict[str, float] = {}
    statistics_failed = False
    for r in rows:
        part = r["part"]
        if part == "stale":
            return Retrieval(channels, visible_stats, None, details, stale=True)
        if part == "hit":
            key = (int(r["document_id"]), int(r["ordinal"]))
            channels[r["channel"]].hits.append(ChannelHit(*key, float(r["score"]), r["detail"]))
            if r["chunk_id"] is not None and key not in details:
                details[key] = chunk_detail(r, parsed)
        elif part == "df":
            frequencies[r["term"]] = int(r["df"])
        elif part == "visible":
            visible_stats = Visible(int(r["documents"]), int(r["chunks"]), float(r["average_length"]))
            stages["visible"] = float(r["ms"])
        elif part == "stage" and r["channel"] in channels:
            result = channels[r["channel"]]
            result.ms, result.path = float(r["ms"]), r["detail"]
            result.error = None if r["error"] is None else _sqlstate_name(r["error"])
        elif part == "stage":
            stages[r["channel"]] = float(r["ms"])
            statistics_failed |= r["channel"] == "statistics" and r["error"] is not None
    for name, result in channels.items():
        if result.error is not None:
            logger.warning("V2 channel %s failed in the retrieve statement: %s", name, result.error)
    return Retrieval(channels, visible_stats, None if statistics_failed else frequencies, details, stages)


def alone(ask: ChannelQuery) -> dict[str, ChannelQuery]:
    """`ask` split by channel: each asked channel with nothing to look up for the other two."""
    asks = {
        "exact": dataclasses.replace(ask, terms=(), trigram_text=None, query=None),
        "lexical": dataclasses.replace(ask, keys=(), phrases=(), query=None),
        "vector": dataclasses.replace(ask, keys=(), phrases=(), terms=(), trigram_text=None),
    }
    asked = {
        "exact": exact_args(ask).asked,
        "lexical": lexical_args(ask).asked,
        "vector": ask.query is not None,
    }
    return {name: asks[name] for name in CHANNEL_NAMES if asked[name]}


async def retrieve_per_channel(
    conn: asyncpg.Connection,
    scope: Scope,
    run_id: int,
    ask: ChannelQuery,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - asyncpg's own per-statement timeout
    check: RunCheck | None = None,
) -> Retrieval:
    """What `retrieve` returns, from the same statement asked for one channel at a time on `conn`.

    A channel whose statement fails as a whole comes back with its `error` (the exception's class
    name) and no hits; a failed lexical statement leaves the statistics unknown (None). `stale`
    as soon as one statement finds the run replaced.
    """
    scope.for_reading()
    # with nothing to look up anywhere, the statement still tells what is visible
    asks = alone(ask) or {"lexical": ask}
    channels = {name: ChannelResult() for name in CHANNEL_NAMES}
    parts: dict[str, Retrieval] = {}
    for name, one in asks.items():
        started = time.perf_counter()
        try:
            # a transaction of its own (a savepoint inside the caller's), so that a failure cannot
            # abort the transaction the next channel's statement needs
            async with conn.transaction():
                part = await retrieve(conn, scope, run_id, one, timeout=timeout, check=check)
        except ScopeError:
            raise  # a programming error, not a channel's
        except Exception as exc:  # this channel's statement as a whole: the others still answer
            logger.warning("V2 channel %s failed on its own statement: %s", name, exc.__class__.__name__)
            channels[name] = ChannelResult(
                ms=(time.perf_counter() - started) * 1000, error=type(exc).__name__
            )
            continue
        if part.stale:
            return part
        parts[name] = part
        channels[name] = part.channels[name]
    return _merged(channels, parts)


def _merged(channels: dict[str, ChannelResult], parts: dict[str, Retrieval]) -> Retrieval:
    """One `Retrieval` of the per-channel statements' parts (each channel's result from its own)."""
    stages: dict[str, float] = {}
    details: dict[Key, ChunkDetail] = {}
    for part in parts.values():
        details.update(part.details)
        for stage, ms in part.stages_ms.items():
            stages[stage] = stages.get(stage, 0.0) + ms
    seen = next((part.visible for part in parts.values()), Visible(0, 0, 0.0))
    if "lexical" in parts:
        frequencies = parts["lexical"].document_frequency
    else:  # no lexical statement: {} when none was asked for, unknown when it failed
        frequencies = None if channels["lexical"].error is not None else {}
    return Retrieval(channels, seen, frequencies, details, stages, separately=True)
