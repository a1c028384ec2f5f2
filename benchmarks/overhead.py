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
`--http` also serves each side's app under uvicorn as `python -m app` does (httptools, uvloop, the
access line; still no database) and times the requests from the lean client, the sides alternating
request by request, beside the floor of the stack: a path no route matches (404). Then each stage
alone (this checkout; the fastest of repeats). The same requests against the real service and
database: `scripts/bench --ab REF` (its overhead columns: client time minus embed, pool and db).
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
    """The search service minus the database: k ready hits."""

    def __init__(self, k: int) -> None:
        self._hits = _hits(k)

    async def search(self, query: str, scope: Any, k: int) -> Any:
        """k canned hits, whatever was asked."""
        from app.search.service import SearchOutcome

        return SearchOutcome(hits=self._hits, path="exact")


def _app(k: int) -> tuple[Any, str]:
    """The app with the canned search, and a bearer token for it."""
    import logging

    import jwt

    from app.access.allowlist import OpenAllowList
    from app.access.scope import Access
    from app.config import load_settings
    from app.config_sections import AccessSettings
    from app.main import create_app

    settings = load_settings(JWT_SECRET=SECRET, EMBEDDINGS_PROVIDER="local")
    app = create_app(settings)
    logging.getLogger("ragoverlay.access").setLevel(logging.WARNING)  # one line per request
    # the real access rules (the caller's scope, built as every route builds it) over a made-up collection
    access = Access.of(AccessSettings.from_settings(settings), uuid.uuid4(), OpenAllowList())
    app.state.services = SimpleNamespace(
        settings=settings, search=_CannedSearch(k), access=access, admin_ids=frozenset()
    )
    now = int(time.time())
    token = jwt.encode({"id": "bench-user", "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")
    return app, token


async def _call_cpu_us(app: Any, path: str, raw: bytes, token: str, stack: Any = None) -> tuple[float, int]:
    """One request through the ASGI app (or its `stack` of middleware); CPU microseconds and status."""
    scope = {
        "app": app,
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
    await (stack or app)(scope, receive, send)
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

    from app.access.principal import TokenCache, verify_token
    from app.config_sections import SearchSettings
    from app.schemas import QueryMultipleRequest
    from app.search.planner import plan_vector_search
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
    out.extend(_middleware_share(app, token, raw))
    return out


def _middleware_share(app: Any, token: str, raw: bytes, requests: int = 500) -> list[tuple[str, float]]:
    """CPU µs p50 of a 1,000-id request through the whole app, and without its own middleware."""
    full = app.build_middleware_stack()
    saved = app.user_middleware
    app.user_middleware = []
    try:
        bare = app.build_middleware_stack()
    finally:
        app.user_middleware = saved

    async def p50(stack: Any) -> float:
        for _ in range(50):
            await _call_cpu_us(app, "/query_multiple", raw, token, stack)
        samples = [
            (await _call_cpu_us(app, "/query_multiple", raw, token, stack))[0] for _ in range(requests)
        ]
        return _percentile(samples, 0.5)

    async def both() -> tuple[float, float]:
        return await p50(full), await p50(bare)

    with_mw, without = asyncio.run(both())
    names = ", ".join(m.cls.__name__ for m in saved)
    return [
        ("1,000 ids: a whole request (p50)", with_mw),
        (f"1,000 ids: the same without the app's middleware ({names})", without),
    ]


# run this file as `-c`, not as a script: a script's folder (benchmarks/) would shadow the standard
# library's `http` with benchmarks/http.py
_RUN_THIS = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def _this_file_command(python: str, *argv: str) -> list[str]:
    return [python, "-c", _RUN_THIS, str(Path(__file__).resolve()), *argv]


def _side(python: str, app_root: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """`measure` in a subprocess whose `app` comes from `app_root`."""
    argv = ["--side", "--sizes", ",".join(map(str, args.sizes)), "--requests", str(args.requests)]
    done = subprocess.run(
        _this_file_command(python, *argv, "--k", str(args.k)),
        env=dict(os.environ, PYTHONPATH=str(app_root)),
        check=False,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measurement of {app_root} failed:\n{done.stderr[-3000:]}")
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def serve(port: int, k: int) -> None:
    """The app with the canned search under uvicorn as `python -m app` runs it (no lifespan)."""
    import uvicorn

    from app.runtime.request_timeouts import stall_guarded_protocol

    app, _ = _app(k)
    header_timeout = app.state.services.settings.request_header_timeout_s
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        lifespan="off",  # no database: the services are the canned ones
        http=stall_guarded_protocol(header_timeout),
    )
    import logging

    logging.getLogger("ragoverlay.access").setLevel(logging.INFO)  # the access line, as in service
    uvicorn.Server(config).run()


async def _alternate_http(ports: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    """Each request to every server in turn; client ms per row and server."""
    import jwt

    from benchmarks.http import LeanHTTP

    now = int(time.time())
    token = jwt.encode({"id": "bench-user", "iat": now, "exp": now + 3600}, SECRET, algorithm="HS256")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    clients = {label: LeanHTTP("127.0.0.1", port) for label, port in ports.items()}
    loop = asyncio.get_running_loop()
    for label, client in clients.items():  # ready: an unmatched path answers 404
        deadline = loop.time() + 60
        while True:
            try:
                if (await client.request("GET", "/no-such-route")).status == 404:
                    break
            except OSError:
                if loop.time() > deadline:
                    raise RuntimeError(f"server {label} did not start") from None
                await asyncio.sleep(0.2)
    rows: dict[str, Any] = {}
    requests: list[tuple[str, str, str, bytes]] = [("GET unmatched path (404)", "GET", "/no-such-route", b"")]
    for row, raw in _bodies(args.sizes).items():
        requests.append((f"{row} ids", "POST", row.split(" ")[0], raw))
    for row, method, path, raw in requests:
        samples: dict[str, list[float]] = {label: [] for label in clients}
        for i in range(args.requests + 50):
            for label, client in clients.items():
                t0 = time.perf_counter()
                reply = await client.request(method, path, raw, headers)
                elapsed = (time.perf_counter() - t0) * 1000
                if reply.status not in (200, 404):
                    raise RuntimeError(f"{row} on {label}: status {reply.status}")
                if i >= 50:  # the first 50 warm up
                    samples[label].append(elapsed)
        rows[row] = {
            label: {"p50": _percentile(v, 0.5), "p95": _percentile(v, 0.95)} for label, v in samples.items()
        }
    for client in clients.values():
        await client.aclose()
    return rows


def http_compare(args: argparse.Namespace, roots: dict[str, Path]) -> str:
    """The canned app of each root under uvicorn at once; requests alternate between them."""
    from benchmarks.service import free_port

    ports = {label: free_port() for label in roots}
    servers = [
        subprocess.Popen(
            _this_file_command(sys.executable, "--serve", str(ports[label]), "--k", str(args.k)),
            env=dict(os.environ, PYTHONPATH=str(root)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # the access lines are written, and dropped
            cwd=tempfile.gettempdir(),
        )
        for label, root in roots.items()
    ]
    try:
        rows = asyncio.run(_alternate_http(ports, args))
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    labels = list(roots)
    head = " | ".join(f"{label} p50 | {label} p95" for label in labels)
    lines = [
        f"over HTTP (uvicorn, httptools, the lean client; no database): client ms, k={args.k}, "
        f"{args.requests} requests per row, alternating {', '.join(labels)}",
        "",
        f"| request | {head} |" + (" B/A p50 |" if len(labels) == 2 else ""),
        "|---|" + "---:|" * (2 * len(labels) + (1 if len(labels) == 2 else 0)),
    ]
    for row, by_label in rows.items():
        cells = " | ".join(f"{by_label[x]['p50']:.3f} | {by_label[x]['p95']:.3f}" for x in labels)
        ratio = f" {by_label['B']['p50'] / by_label['A']['p50']:.2f}x |" if len(labels) == 2 else ""
        lines.append(f"| {row} | {cells} |{ratio}")
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def compare(args: argparse.Namespace) -> str:
    """Rounds alternating REF (A) and this checkout (B); the median over rounds of each p50 / p95.

    With `--http`, then both over HTTP at once, requests alternating.
    """
    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks.ab import ref_worktree, resolve_ref

    commit = resolve_ref(args.ref)
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="ragoverlay-overhead-") as tmp:
        with ref_worktree(commit, Path(tmp) / "ref") as tree:
            for _ in range(args.rounds):
                rounds["A"].append(_side(sys.executable, tree, args))
                rounds["B"].append(_side(sys.executable, REPO_ROOT, args))
            http = http_compare(args, {"A": tree, "B": REPO_ROOT}) if args.http else ""
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
    if http:
        lines += ["", http]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`scripts/bench overhead [--ref REF]`."""
    p = argparse.ArgumentParser(prog="scripts/bench overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1, 100, 1000])
    p.add_argument("--requests", type=int, default=1000, help="timed requests per row (%(default)s)")
    p.add_argument("--k", type=int, default=10, help="chunks in each answer (%(default)s)")
    p.add_argument("--ref", default=None, help="also measure git ref REF, alternating with this checkout")
    p.add_argument("--rounds", type=int, default=3, help="rounds per side with --ref (%(default)s)")
    p.add_argument(
        "--http", action="store_true", help="also over HTTP: the same app under uvicorn, no database"
    )
    p.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:  # one side of a comparison: its figures as one JSON line
        print(json.dumps(measure(args.sizes, args.requests, args.k)))
        return 0
    if args.serve is not None:  # one server of the HTTP comparison
        serve(args.serve, args.k)
        return 0
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at start: {load}")
    if args.ref:
        print(compare(args))
    else:
        print("| request | CPU µs p50 | p95 |\n|---|---:|---:|")
        for row, figures in measure(args.sizes, args.requests, args.k).items():
            print(f"| {row} ids | {figures['p50']:.0f} | {figures['p95']:.0f} |")
        if args.http:
            print("\n" + http_compare(args, {"B": REPO_ROOT}))
    print("\n| stage alone | µs |\n|---|---:|")
    for name, us in stages(args.k):
        print(f"| {name} | {us:.1f} |")
    print(f"\nload average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
