"""`scripts/bench overhead`: what a V1 search request costs outside the database, stage by stage.

In process, no database and no socket: the app from `create_app`, with its services replaced *here
only* by a search that answers k canned chunks without SQL and the pass-through allow-list, is
called as an ASGI app with a ready body. What is timed is everything else a request does: the
middleware, reading and parsing the JSON body, validating up to 1,000 file ids, the token, the
dependencies, the scope, the answer's JSON and its headers. Times are the thread's CPU time
(`time.thread_time`), so other processes on a busy machine do not count; the body is encoded
before the clock starts.

`--ref REF` runs the same measurement on git ref REF (checked out under a temporary folder, its
`app` on this interpreter) in rounds alternating with this checkout's, and prints both with B/A.
Then each stage alone (this checkout; the fastest of repeats). The same requests over real HTTP
against the real service and database: `scripts/bench --ab REF` (its overhead columns).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTION = "How often must the pump be serviced, and which lubricant does the gearbox need?"
SECRET = "overhead-benchmark-secret-0123456789-0123456789"  # noqa: S105 (a local benchmark's own)
# a chunk as rag_api stores one: ~1,000 characters with some non-ASCII, and its metadata keys
CHUNK_TEXT = ("The pump's seal needs service every 2,000 hours; Grüße an die Wartung. " * 14)[:1000]


def _hits(k: int) -> list[Any]:
    from app.store.chunks import ChunkHit

    return [
        ChunkHit(
            uuid.uuid4(),
            f"file-{i}",
            CHUNK_TEXT,
            {"file_id": f"file-{i}", "user_id": "bench-user", "digest": "0" * 32, "source": "manual.pdf"}
            | {"page": i},
            0.2 + i / 1000,
        )
        for i in range(k)
    ]


class _CannedSearch:
    """The search service minus the database: the real scope, k ready hits."""

    def __init__(self, k: int) -> None:
        self._hits = _hits(k)
        self._collection = uuid.uuid4()

    def scope(self, owners: Any, uploader: Any, file_ids: Any = None) -> Any:
        """The caller's scope, built as the service builds it."""
        from app.store.scope import Scope

        return Scope.of(self._collection, owners, uploader=uploader, file_ids=file_ids)

    async def search(self, query: str, scope: Any, k: int) -> Any:
        """k canned hits, whatever was asked."""
        from app.search.service import SearchOutcome

        return SearchOutcome(hits=self._hits, path="exact")


def _app(k: int) -> tuple[Any, str]:
    """The app with the canned search, and a bearer token for it."""
    import logging

    import jwt

    from app.config import load_settings
    from app.main import create_app
    from app.search.allowlist import OpenAllowList

    settings = load_settings(JWT_SECRET=SECRET, EMBEDDINGS_PROVIDER="local")
    app = create_app(settings)
    logging.getLogger("ragoverlay.access").setLevel(logging.WARNING)  # one line per request
    app.state.services = SimpleNamespace(
        settings=settings, search=_CannedSearch(k), allowlist=OpenAllowList(), admin_ids=frozenset()
    )
    now = int(time.time())
    token = jwt.encode({"id": "bench-user", "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")
    return app, token


async def _call_cpu_us(app: Any, path: str, raw: bytes, token: str) -> tuple[float, int]:
    """One request through the whole ASGI app; its CPU microseconds and status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    t0 = time.thread_time()
    await app(scope, receive, send)
    return (time.thread_time() - t0) * 1e6, status


def _bodies(sizes: list[int]) -> dict[str, bytes]:
    out = {}
    for n in sizes:
        ids = [str(uuid.uuid4()) for _ in range(n)]
        out[f"/query_multiple {n}"] = json.dumps({"query": QUESTION, "file_ids": ids, "k": 10}).encode()
    out["/query 1"] = json.dumps({"query": QUESTION, "file_id": str(uuid.uuid4()), "k": 10}).encode()
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(sizes: list[int], requests: int, k: int) -> dict[str, dict[str, float]]:
    """CPU µs per request (p50, p95) of each row, after a warm-up."""
    app, token = _app(k)

    async def run() -> dict[str, dict[str, float]]:
        out = {}
        for row, raw in _bodies(sizes).items():
            path = row.split(" ")[0]
            for _ in range(max(20, requests // 10)):
                _, status = await _call_cpu_us(app, path, raw, token)
                if status != 200:
                    raise RuntimeError(f"{row}: status {status}")
            samples = [(await _call_cpu_us(app, path, raw, token))[0] for _ in range(requests)]
            out[row] = {"p50": _percentile(samples, 0.5), "p95": _percentile(samples, 0.95)}
        return out

    return asyncio.run(run())


def stages(k: int) -> list[tuple[str, float]]:
    """Each stage alone, µs (the fastest of five repeats)."""
    import orjson

    from app.auth import TokenCache, verify_token
    from app.schemas import QueryMultipleRequest
    from app.search.planner import SearchSettings, plan_vector_search
    from app.search.state import SearchState
    from app.store.scope import Scope

    app, token = _app(k)
    settings = app.state.services.settings
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    raw = json.dumps({"query": QUESTION, "file_ids": ids, "k": 10}).encode()
    parsed = json.loads(raw)
    collection = uuid.uuid4()
    scope = Scope.of(collection, ["bench-user"], uploader="bench-user", file_ids=ids)
    knowledge, plan_settings = SearchState().knowledge(), SearchSettings.from_settings(settings)
    hits = _hits(k)
    payload = [
        [{"id": str(h.id), "page_content": h.text, "metadata": h.metadata, "type": "Document"}, h.distance]
        for h in hits
    ]
    header = f"Bearer {token}"
    cache = TokenCache()
    cases: list[tuple[str, Callable[[], object]]] = [
        ("1,000 ids: json.loads of the body", lambda: json.loads(raw)),
        ("1,000 ids: orjson.loads of the body", lambda: orjson.loads(raw)),
        ("1,000 ids: QueryMultipleRequest validation", lambda: QueryMultipleRequest.model_validate(parsed)),
        ("1,000 ids: list(dict.fromkeys(ids))", lambda: list(dict.fromkeys(ids))),
        (
            "1,000 ids: Scope.of",
            lambda: Scope.of(collection, ["bench-user"], uploader="bench-user", file_ids=ids),
        ),
        (
            "1,000 ids: the planner (no statistics yet)",
            lambda: plan_vector_search(
                dims=384,
                k=10,
                file_ids=scope.file_ids or (),
                owners=scope.owners,
                uploader=scope.uploader,
                knowledge=knowledge,
                settings=plan_settings,
            ),
        ),
        ("token: PyJWT verification", lambda: verify_token(header, secret=SECRET, audience=None)),
        (
            "token: a repeat (TokenCache)",
            lambda: verify_token(header, secret=SECRET, audience=None, cache=cache),
        ),
        (f"k={k} answer: json.dumps", lambda: json.dumps(payload, ensure_ascii=False).encode()),
        (f"k={k} answer: orjson.dumps", lambda: orjson.dumps(payload)),
    ]
    out = []
    for name, fn in cases:
        fn()
        number = 200
        best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
        out.append((name, best))
    return out


def _side(python: str, app_root: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """`measure` in a subprocess whose `app` comes from `app_root`."""
    env = dict(os.environ, PYTHONPATH=str(app_root))
    argv = ["--side", "--sizes", ",".join(map(str, args.sizes)), "--requests", str(args.requests)]
    argv += ["--k", str(args.k)]
    # run as `-c`, not as a script: a script's folder (benchmarks/) would shadow the standard
    # library's `http` with benchmarks/http.py
    code = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    done = subprocess.run(
        [python, "-c", code, str(Path(__file__).resolve()), *argv],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measurement of {app_root} failed:\n{done.stderr[-3000:]}")
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def compare(args: argparse.Namespace) -> str:
    """Rounds alternating REF (A) and this checkout (B); the median over rounds of each p50 / p95."""
    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks.ab import ref_worktree, resolve_ref

    commit = resolve_ref(args.ref)
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="ragoverlay-overhead-") as tmp:
        with ref_worktree(commit, Path(tmp) / "ref") as tree:
            for _ in range(args.rounds):
                rounds["A"].append(_side(sys.executable, tree, args))
                rounds["B"].append(_side(sys.executable, REPO_ROOT, args))
    lines = [
        f"A = {args.ref} ({commit[:10]})   B = this checkout   CPU µs per request in process, "
        f"k={args.k}, median of {args.rounds} rounds of {args.requests} requests",
        "",
        "| request | A p50 | B p50 | B/A | A p95 | B p95 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rounds["A"][0]:
        a50 = _median([r[row]["p50"] for r in rounds["A"]])
        b50 = _median([r[row]["p50"] for r in rounds["B"]])
        a95 = _median([r[row]["p95"] for r in rounds["A"]])
        b95 = _median([r[row]["p95"] for r in rounds["B"]])
        lines.append(f"| {row} ids | {a50:.0f} | {b50:.0f} | {b50 / a50:.2f}x | {a95:.0f} | {b95:.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`scripts/bench overhead [--ref REF]`."""
    p = argparse.ArgumentParser(prog="scripts/bench overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1, 100, 1000])
    p.add_argument("--requests", type=int, default=1000, help="timed requests per row (%(default)s)")
    p.add_argument("--k", type=int, default=10, help="chunks in each answer (%(default)s)")
    p.add_argument("--ref", default=None, help="also measure git ref REF, alternating with this checkout")
    p.add_argument("--rounds", type=int, default=3, help="rounds per side with --ref (%(default)s)")
    p.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:  # one side of a comparison: its figures as one JSON line
        print(json.dumps(measure(args.sizes, args.requests, args.k)))
        return 0
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at start: {load}")
    if args.ref:
        print(compare(args))
    else:
        print("| request | CPU µs p50 | p95 |\n|---|---:|---:|")
        for row, figures in measure(args.sizes, args.requests, args.k).items():
            print(f"| {row} ids | {figures['p50']:.0f} | {figures['p95']:.0f} |")
    print("\n| stage alone | µs |\n|---|---:|")
    for name, us in stages(args.k):
        print(f"| {name} | {us:.1f} |")
    print(f"\nload average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
