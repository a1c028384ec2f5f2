"""Pieces of `/query_v2`'s admin `debug` output: each stage's list, each channel, the vector plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.evidence.query.evidence import display_page
from app.evidence.query.records import Fused, Scored
from app.evidence.query.vectors import PlannedVectors
from app.evidence.store import channels as channels_sql


def stage_list(items: Sequence[Fused] | Sequence[Scored], k: int) -> list[dict[str, Any]]:
    """The first k items of a stage as the debug output shows them."""
    out: list[dict[str, Any]] = []
    for item in items[:k]:
        c = item.candidate
        score = item.final_score if isinstance(item, Fused) else item.score
        out.append(
            {
                "chunk_id": c.chunk_id,
                "file_id": c.file_id,
                "page": display_page(c.place.page),
                "score": round(float(score), 6),
                "content": c.content,
            }
        )
    return out


def channel_debug(result: channels_sql.ChannelResult) -> dict[str, Any]:
    """What the debug output says of one channel."""
    return {"hits": len(result.hits), "ms": round(result.ms, 2), "error": result.error, "path": result.path}


def plan_debug(planned: PlannedVectors | None) -> dict[str, Any] | None:
    """The vector channel's path and visible estimate, for the debug output."""
    if planned is None:
        return None
    return {"path": planned.plan.path, "visible_estimate": planned.visible_estimate}
