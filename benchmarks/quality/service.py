"""`scripts/serve` on its embedded defaults as the service under test, and the uploads through `/embed`.

The service runs with a fresh `JWT_SECRET` and the benchmark's user in `RAG_ADMIN_USER_IDS`, and every
request carries that admin's token: `/query_v2` gives its per-stage `debug` and the `/v2/...` routes
answer only to an admin. Agent knowledge bases are read through `entity_id`, as without a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from benchmarks.quality.dataset import Chunk, Document
from benchmarks.service import REPO_ROOT, free_port, make_token, service_environment

SERVE = REPO_ROOT / "scripts" / "serve"
ADMIN_USER = "quality-bench-admin"
TOKEN_TTL_S = 7 * 24 * 3600  # a full run with a new upload and a V2 backfill takes hours


def admin_token(secret: str, user_id: str = ADMIN_USER, *, role: bool = False) -> str:
    """An HS256 token for `user_id`; `role`: with `role: ADMIN` too (any service with that secret)."""
    if not role:
        return make_token(secret, user_id, ttl=TOKEN_TTL_S)
    now = int(time.time())
    claims = {"id": user_id, "role": "ADMIN", "iat": now, "exp": now + TOKEN_TTL_S}
    return jwt.encode(claims, secret, algorithm="HS256")


def auth_headers(token: str | None) -> dict[str, str]:
    """`Authorization: Bearer <token>`, or nothing without a token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class Served:
    """A running `scripts/serve` (unauthenticated, loopback only) and where it keeps its data."""

    data_dir: Path
    log_path: Path
    port: int
    process: subprocess.Popen[bytes]
    token: str | None = None  # an admin's token (None: the service runs without JWT_SECRET)

    @property
    def base_url(self) -> str:
        """Where it listens."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of its log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


async def start(data_dir: Path, extra_env: Mapping[str, str], *, timeout_s: float = 600.0) -> Served:
    """Start `scripts/serve` with DATA_DIR=`data_dir` on a free port, a fresh JWT_SECRET and our admin
    (unless `extra_env` sets JWT_SECRET itself); wait for GET /health UP."""
    await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
    port = free_port()
    auth: dict[str, str] = {}
    token = None
    if "JWT_SECRET" not in extra_env:
        secret = secrets.token_hex(32)
        auth = {"JWT_SECRET": secret, "RAG_ADMIN_USER_IDS": ADMIN_USER}
        token = admin_token(secret)
    env = service_environment(
        {"DATA_DIR": str(data_dir), "RAG_PORT": str(port), "RAG_HOST": "127.0.0.1", **auth, **extra_env}
    )
    log_path = data_dir / "service.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 - returns at once; a sync handle survives Ctrl-C
            ["bash", str(SERVE)],
            cwd=str(REPO_ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    served = Served(data_dir, log_path, port, process, token)
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"scripts/serve exited with {process.returncode}:\n{served.log_tail()}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                reply = await client.get(f"{served.base_url}/health")
                if reply.status_code == 200 and reply.json().get("status") == "UP":
                    return served
            if time.monotonic() > deadline:
                stop(served)
                raise RuntimeError(f"GET /health not UP after {timeout_s:.0f} s:\n{served.log_tail()}")
            await asyncio.sleep(0.5)


def stop(served: Served, within_s: float = 60.0) -> None:
    """SIGTERM to its process group, SIGKILL if it does not exit in time."""
    process = served.process
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


async def stored_ids(client: httpx.AsyncClient, kb: str) -> set[str]:
    """File ids the service holds for the knowledge base (`GET /ids?entity_id=`)."""
    reply = await client.get("/ids", params={"entity_id": kb})
    reply.raise_for_status()
    return set(reply.json())


async def upload(
    base_url: str,
    docs: Sequence[Document],
    *,
    concurrency: int = 2,
    say: Callable[[str], None] = lambda _m: None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Upload the documents the service does not hold yet through `POST /embed` (multipart, with the
    KB as `entity_id`, as LibreChat sends an Agent's files); returns counts and timings."""
    facts: dict[str, Any] = {"uploaded": 0, "already_stored": 0, "seconds": 0.0, "bytes": 0}
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(900.0), headers=headers) as client:
        present: set[str] = set()
        for kb in sorted({d.kb for d in docs}):
            present |= await stored_ids(client, kb)
        todo = [d for d in docs if d.file_id not in present]
        facts["already_stored"] = len(docs) - len(todo)
        if not todo:
            return facts
        gate = asyncio.Semaphore(concurrency)
        done = 0
        t0 = time.perf_counter()
        last_said = t0

        async def one(doc: Document) -> None:
            nonlocal done, last_said
            data = await asyncio.to_thread(Path(doc.path).read_bytes)
            async with gate:
                reply = await client.post(
                    "/embed",
                    data={"file_id": doc.file_id, "entity_id": doc.kb},
                    files={"file": (doc.filename, data, doc.content_type)},
                )
            if reply.status_code != 200 or not reply.json().get("status"):
                raise RuntimeError(
                    f"POST /embed {doc.file_id} answered {reply.status_code}: {reply.text[:300]}"
                )
            facts["bytes"] += len(data)
            done += 1
            now = time.perf_counter()
            if now - last_said > 15:
                last_said = now
                say(f"uploaded {done}/{len(todo)} ({done / (now - t0):.2f} files/s)")

        await asyncio.gather(*(one(d) for d in todo))
        facts["uploaded"] = len(todo)
        facts["seconds"] = round(time.perf_counter() - t0, 1)
    return facts


async def fetch_chunks(
    base_url: str, docs: Sequence[Document], batch: int = 40, headers: Mapping[str, str] | None = None
) -> dict[str, list[Chunk]]:
    """Every stored chunk per KB, in file then chunk order (`GET /documents?ids=...&entity_id=`)."""
    out: dict[str, list[Chunk]] = {}
    by_kb: dict[str, list[str]] = {}
    for d in docs:
        by_kb.setdefault(d.kb, []).append(d.file_id)
    async with httpx.AsyncClient(base_url=base_url, timeout=120.0, headers=headers) as client:
        for kb, ids in by_kb.items():
            chunks: list[Chunk] = []
            for i in range(0, len(ids), batch):
                part = ids[i : i + batch]
                reply = await client.get(
                    "/documents", params=[*(("ids", str(x)) for x in part), ("entity_id", kb)]
                )
                if reply.status_code != 200:
                    raise RuntimeError(f"GET /documents answered {reply.status_code}: {reply.text[:300]}")
                for item in reply.json():
                    meta = item.get("metadata") or {}
                    page = meta.get("page")
                    chunks.append(
                        Chunk(
                            str(meta.get("file_id", "")),
                            item.get("page_content") or "",
                            str(meta.get("digest", "")),
                            page if isinstance(page, int) else None,
                        )
                    )
            out[kb] = chunks
    return out
