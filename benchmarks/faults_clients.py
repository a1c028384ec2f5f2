"""The fault runs' clients: loops of requests through an outage, each answer kept as a Sample."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from benchmarks.service import make_token

JWT_SECRET = "faults-" + secrets.token_hex(16)


@dataclass
class Sample:
    """One request a client sent: when (seconds from the run's start), what, and what came back."""

    start: float
    end: float
    op: str
    status: int  # -1: no answer (connection error)
    detail: str = ""
    tag: str = ""

    @property
    def latency(self) -> float:
        """Seconds from send to answer."""
        return self.end - self.start


Op = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


async def run_clients(
    base_url: str, ops: list[tuple[str, Op]], clients: int, seconds: float, t0: float, tag: Callable[[], str]
) -> list[Sample]:
    """`clients` loops sending `ops` (client i uses ops[i % len]) until `seconds` pass."""
    samples: list[Sample] = []
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base_url, timeout=120.0, limits=limits) as http:

        async def loop(index: int) -> None:
            name, op = ops[index % len(ops)]
            n = 0
            while time.monotonic() < deadline:
                n += 1
                start = time.monotonic() - t0
                label = tag()
                try:
                    response = await op(http, index * 100_000 + n)
                    status, detail = response.status_code, _detail(response)
                except httpx.HTTPError as exc:
                    status, detail = -1, type(exc).__name__
                samples.append(Sample(start, time.monotonic() - t0, name, status, detail, label))

        await asyncio.gather(*(loop(i) for i in range(clients)))
    return samples


def _detail(response: httpx.Response) -> str:
    if response.status_code < 400:
        return ""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict):
            return str(body.get("detail"))[:160]
    return response.text[:160]


def auth(user: str) -> dict[str, str]:
    """Authorization header for `user`."""
    return {"Authorization": f"Bearer {make_token(JWT_SECRET, user)}"}


def upload_op(user: str, prefix: str, *, fresh: bool = True) -> Op:
    """An upload of a small text file; `fresh`: a new file id and text every time (never a reuse)."""

    async def op(http: httpx.AsyncClient, n: int) -> httpx.Response:
        name = f"{prefix}-{secrets.token_hex(4)}-{n}" if fresh else f"{prefix}-{n}"
        text = f"Fault run note {name}: the lighthouse keeper logged wind, rain and {n} gulls."
        return await http.post(
            "/embed",
            data={"file_id": name},
            files={"file": (f"{name}.txt", text.encode(), "text/plain")},
            headers=auth(user),
        )

    return op


def search_op(user: str, file_ids: list[str], *, fresh: bool) -> Op:
    """`/query_multiple` over `file_ids`; `fresh`: a new query text each time (no cache hit)."""

    async def op(http: httpx.AsyncClient, n: int) -> httpx.Response:
        query = f"what did the keeper log {secrets.token_hex(4)}" if fresh else random.choice(QUERIES)
        return await http.post(
            "/query_multiple", json={"query": query, "file_ids": file_ids, "k": 5}, headers=auth(user)
        )

    return op


QUERIES = ["storm", "gulls over the pier", "wind from the north", "lighthouse keeper", "rain at dawn"]


def statuses(samples: list[Sample]) -> dict[str, int]:
    """How many answers of each status (-1: no answer)."""
    return {str(k): v for k, v in sorted(Counter(s.status for s in samples).items())}


def bad_5xx(samples: list[Sample], allowed: tuple[int, ...] = (502, 503)) -> list[Sample]:
    """Answers that must never happen: other 5xx, and no answer at all."""
    return [s for s in samples if s.status == -1 or (s.status >= 500 and s.status not in allowed)]


async def until_ok(base_url: str, op: Op, t0: float, limit_s: float) -> list[Sample]:
    """One client repeating `op` until it answers 200 (or `limit_s` passes)."""
    samples: list[Sample] = []
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            start = time.monotonic() - t0
            try:
                response = await op(http, n)
                status, detail = response.status_code, _detail(response)
            except httpx.HTTPError as exc:
                status, detail = -1, type(exc).__name__
            samples.append(Sample(start, time.monotonic() - t0, "until-ok", status, detail))
            if status == 200:
                break
            await asyncio.sleep(0.2)
    return samples
