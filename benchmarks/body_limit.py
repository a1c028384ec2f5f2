"""`python -m benchmarks.body_limit`: how much a running service grows under parallel oversized JSON bodies.

Starts an embedded PostgreSQL and the service as a real process (`python -m app`), warms it up (the
embedding model loads on the first query), then sends N parallel bodies of SIZE bytes to
`POST /query_multiple` over raw sockets, each a valid JSON document (`{"query", "file_ids": [...]}`)
so that a service without a cap parses all of it. Each scenario gets a fresh service, so one cannot
reuse memory another freed. Scenarios: the default cap with Content-Length, the default cap with a
chunked body (no Content-Length), and, for comparison, the same two with the cap lifted
(`MAX_JSON_BODY_BYTES` = 2 GB), which is how the service behaved before the cap.

Prints a markdown table: status codes, bytes the client got to send before the answer, seconds to
the answer, and the service's RSS growth (peak during the scenario minus the warm baseline). A
measurement, not a test: nothing here asserts a speed or a size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from app.store.embedded import EmbeddedPostgres

from benchmarks.service import MemorySampler, ServiceProcess, make_token

SECRET = secrets.token_hex(32)
PIECE = 256 * 1024
ITEM = b'"file-0123456789abcdef",'  # 24 bytes per id


@dataclass
class Outcome:
    """One request's fate."""

    status: int | None
    sent_bytes: int
    seconds: float


def body_pieces(size: int) -> list[bytes]:
    """A valid JSON body of about `size` bytes, as pieces of PIECE bytes (the last one shorter)."""
    prefix = b'{"query": "storms", "k": 4, "file_ids": ['
    suffix = b'"last"]}'
    items = (size - len(prefix) - len(suffix)) // len(ITEM)
    per_piece = PIECE // len(ITEM)
    pieces = [prefix]
    while items > 0:
        n = min(per_piece, items)
        pieces.append(ITEM * n)
        items -= n
    pieces.append(suffix)
    return pieces


async def send_one(port: int, token: str, pieces: list[bytes], *, chunked: bool) -> Outcome:
    """One POST over a raw socket (keep-alive, as HTTP/1.1 clients do); stops sending once answered."""
    total = sum(len(p) for p in pieces)
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    head = (
        f"POST /query_multiple HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\n{framing}\r\n\r\n"
    )
    received = bytearray()

    async def read_answer() -> None:
        # one complete answer (head + Content-Length bytes), or whatever came before the server closed
        try:
            while chunk := await reader.read(65536):
                received.extend(chunk)
                head, sep, rest = bytes(received).partition(b"\r\n\r\n")
                if sep:
                    length = next(
                        (
                            int(line.split(b":", 1)[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    if len(rest) >= length:
                        return
        except (ConnectionError, OSError):
            pass

    answer = asyncio.create_task(read_answer())
    sent = 0
    try:
        writer.write(head.encode())
        for piece in pieces:
            if answer.done():
                break
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            sent += len(piece)
        if chunked and not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server answered and closed while we were still sending: that is the point
    await asyncio.wait_for(answer, timeout=300)
    raw = bytes(received)
    seconds = time.perf_counter() - started
    writer.close()
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/") else None
    return Outcome(status, sent, seconds)


async def warm_up(service: ServiceProcess, token: str) -> None:
    """One small search: loads the embedding model, opens pool connections."""
    pieces = body_pieces(2000)
    for _ in range(3):
        await send_one(service.port, token, pieces, chunked=False)


def rss(pid: int) -> int:
    """Resident set size of a process, in bytes."""
    return int(psutil.Process(pid).memory_info().rss)


async def scenario(
    dsn: str, root: Path, name: str, settings: dict[str, str], parallel: int, size: int, *, chunked: bool
) -> dict[str, object]:
    """A fresh service, warmed up; `parallel` bodies of `size` bytes at once; its RSS growth."""
    data_dir = root / name.replace(" ", "-")
    service = ServiceProcess(dsn, SECRET, data_dir, data_dir / "service.log", settings)
    await service.start(within_s=240)
    try:
        assert service.process is not None
        token = make_token(SECRET, "bench-user")
        await warm_up(service, token)
        await asyncio.sleep(1.0)
        baseline = rss(service.process.pid)
        sampler = MemorySampler(service.process.pid, interval=0.02)
        sampler.start()
        pieces = body_pieces(size)
        outcomes = await asyncio.gather(
            *(send_one(service.port, token, pieces, chunked=chunked) for _ in range(parallel))
        )
        await asyncio.sleep(0.5)
        sampler.stop()
        after = rss(service.process.pid)
    finally:
        await service.stop()
    return {
        "scenario": name,
        "statuses": sorted({o.status for o in outcomes}, key=str),
        "sent_mib_max": max(o.sent_bytes for o in outcomes) / 2**20,
        "seconds_max": max(o.seconds for o in outcomes),
        "baseline_mib": baseline / 2**20,
        "growth_mib": (sampler.peak_rss - baseline) / 2**20,
        "after_mib": after / 2**20,
    }


async def run(
    dsn: str, root: Path, parallel: int, size_mib: int, include_uncapped: bool
) -> list[dict[str, object]]:
    """Every scenario, one after the other, on the database at `dsn`."""
    size = size_mib * 2**20
    plans: list[tuple[str, dict[str, str], bool]] = [
        ("default cap, Content-Length", {}, False),
        ("default cap, chunked", {}, True),
    ]
    if include_uncapped:
        lifted = {"MAX_JSON_BODY_BYTES": str(2 * 10**9)}
        plans += [("no cap, Content-Length", lifted, False), ("no cap, chunked", lifted, True)]
    rows = []
    for name, settings, chunked in plans:
        row = await scenario(dsn, root, name, settings, parallel, size, chunked=chunked)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], parallel: int, size_mib: int) -> str:
    """The markdown table."""
    lines = [
        f"{parallel} parallel {size_mib} MiB JSON bodies to POST /query_multiple",
        "",
        "| scenario | statuses | client sent (max MiB) | answer after (max s) "
        "| RSS baseline MiB | RSS growth MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {', '.join(str(x) for x in r['statuses'])} | {r['sent_mib_max']:.1f} "
            f"| {r['seconds_max']:.2f} | {r['baseline_mib']:.0f} | {r['growth_mib']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.body_limit", description=__doc__.splitlines()[0])
    p.add_argument("--parallel", type=int, default=4, help="bodies sent at once (%(default)s)")
    p.add_argument("--size-mib", type=int, default=50, help="size of each body in MiB (%(default)s)")
    p.add_argument("--no-uncapped", action="store_true", help="skip the comparison with the cap lifted")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ragoverlay-body-limit-"))
    root.chmod(0o755)  # the embedded server may run as another user when we run as root
    server = EmbeddedPostgres(root / "postgres")
    info = server.start()
    try:
        rows = asyncio.run(run(info.dsn, root, args.parallel, args.size_mib, not args.no_uncapped))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(report(rows, args.parallel, args.size_mib))


if __name__ == "__main__":
    main()
