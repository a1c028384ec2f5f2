"""Uploads in the background while questions are timed: evidence search's latency beside ingestion.

    async with uploading(base_url, corpus.documents, headers) as busy:
        timed = await timed_pass(...)          # V1 and /query_v2 while the service ingests
    busy.facts                                 # uploads finished, chunks, seconds, load

"Evidence search better than V1" asks for `/query_v2` p50 <= 3x V1 on a quiet machine and while
evidence is being indexed. Since one upload stages both indexes, "while evidence jobs run" is while
uploads run: the biggest files of the corpus are uploaded again and again, one at a time (as
LibreChat sends a user's files), under new file ids into a namespace of their own (`BUSY_KB`, with
evidence search on), so each upload parses, chunks, embeds and stages evidence in the same service
the questions go to. Nothing the questions read changes: their knowledge bases are other
namespaces. The copies are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.quality.dataset import Document

BUSY_KB = "agent_nat_busy"
BIGGEST = 8  # the files uploaded in turn: the corpus's biggest, long enough to overlap many questions


@dataclasses.dataclass
class Busy:
    """What the background uploads did while they ran."""

    uploads: int = 0
    evidence_chunks: int = 0  # staged into the busy namespace's evidence index by those uploads
    failures: int = 0
    started: float = dataclasses.field(default_factory=time.perf_counter)
    load: list[float] = dataclasses.field(default_factory=lambda: [round(os.getloadavg()[0], 2)])
    file_ids: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0  # how long the questions ran beside the uploads

    @property
    def facts(self) -> dict[str, Any]:
        """The figures for the result document."""
        return {
            "namespace": BUSY_KB,
            "uploads": self.uploads,
            "evidence_chunks": self.evidence_chunks,
            "failures": self.failures,
            "seconds": self.seconds,
            "load": self.load,
        }


def biggest(docs: Sequence[Document], n: int = BIGGEST) -> list[Document]:
    """The `n` biggest documents by size on disk (ties by file id)."""
    return sorted(docs, key=lambda d: (-Path(d.path).stat().st_size, d.file_id))[:n]


async def _upload_loop(
    client: httpx.AsyncClient, docs: Sequence[Document], busy: Busy, stop: asyncio.Event
) -> None:
    """Upload copies of `docs` one after another until `stop` is set (the upload under way finishes)."""
    n = 0
    while not stop.is_set():
        doc = docs[n % len(docs)]
        file_id = f"busy-{n}-{doc.file_id}"[:200]
        n += 1
        data = await asyncio.to_thread(Path(doc.path).read_bytes)
        busy.file_ids.append(file_id)
        reply = await client.post(
            "/embed",
            data={"file_id": file_id, "entity_id": BUSY_KB},
            files={"file": (doc.filename, data, doc.content_type)},
        )
        body = reply.json() if reply.status_code == 200 else {}
        if body.get("status"):
            busy.uploads += 1
            busy.evidence_chunks += int((body.get("evidence") or {}).get("chunks") or 0)
        else:
            busy.failures += 1


@contextlib.asynccontextmanager
async def uploading(
    base_url: str, docs: Sequence[Document], headers: Mapping[str, str] | None = None
) -> AsyncIterator[Busy]:
    """Upload the biggest of `docs` in turn while the body runs; then stop and delete the copies.

    The upload under way when the body ends is waited for, not cut off: a cut request could still be
    stored after the delete, and leave a copy behind.
    """
    busy = Busy()
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(900.0), headers=headers) as client:
        task = asyncio.create_task(_upload_loop(client, biggest(docs), busy, stop), name="busy-uploads")
        await asyncio.sleep(2.0)  # the first upload is parsing by the time the first question goes
        try:
            yield busy
        finally:
            busy.load.append(round(os.getloadavg()[0], 2))
            busy.seconds = round(time.perf_counter() - busy.started, 1)
            stop.set()
            await task
            if busy.file_ids:
                reply = await client.request("DELETE", "/documents", json=busy.file_ids, timeout=300.0)
                if reply.status_code != 200:
                    raise RuntimeError(
                        f"deleting the busy copies answered {reply.status_code}: {reply.text[:300]}"
                    )
