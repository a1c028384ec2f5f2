"""The fault scenarios: each breaks one thing under load and returns what the clients saw and its checks."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx

from benchmarks.faults_clients import (
    JWT_SECRET,
    Sample,
    auth,
    bad_5xx,
    run_clients,
    search_op,
    statuses,
    until_ok,
    upload_op,
)
from benchmarks.faults_context import Context, metric_at_least, postmaster_pid, say, seed_on
from benchmarks.faults_upstreams import SeaweedFS
from benchmarks.service import ServiceProcess, make_token
from benchmarks.stats import summarize

Result = dict[str, Any]


async def scenario_postgres(ctx: Context) -> Result:
    """SIGKILL the embedded PostgreSQL under search load; the service restarts it and recovers."""
    service, p = ctx.service, ctx.params
    assert service is not None and service.process is not None
    pid_before = service.process.pid
    pg_pid = postmaster_pid(service.data_dir)
    ops = [("query_multiple", search_op(ctx.user, ctx.files, fresh=False))]
    t0 = time.monotonic()
    kill_at = p.load_s * 0.25
    say(
        f"postgres: {p.clients} clients searching for {p.load_s:g} s; "
        f"SIGKILL to PostgreSQL (pid {pg_pid}) at {kill_at:g} s"
    )

    async def killer() -> float:
        await asyncio.sleep(kill_at)
        os.kill(pg_pid, signal.SIGKILL)
        return time.monotonic() - t0

    load = asyncio.create_task(run_clients(service.base_url, ops, p.clients, p.load_s, t0, lambda: ""))
    killed = await killer()
    samples = await load
    if not any(s.status == 200 and s.start > killed + 0.5 for s in samples):
        say("postgres: not recovered while the load ran; one client goes on until it is (at most 60 s)")
        samples += await until_ok(service.base_url, ops[0][1], t0, 60.0)
    unavailable = [s for s in samples if s.status == 503 and s.end >= killed]
    last_503 = max((s.start for s in unavailable), default=killed)
    recovered = min((s.end for s in samples if s.status == 200 and s.start > last_503), default=None)
    # the supervisor counts its restart when `pg_ctl start` returns, which can be a moment after the
    # server already answers a search: the count may follow the recovery (seen once in 14 runs)
    restarts = await metric_at_least(service, "ragoverlay_database_restarts_total", 1, within_s=10.0)
    result: Result = {
        "requests": len(samples),
        "statuses": statuses(samples),
        "other_5xx_or_no_answer": len(bad_5xx(samples, allowed=(503,))),
        "503_latency_s": summarize([s.latency for s in unavailable]),
        "503_with_detail": all("database" in s.detail.lower() for s in unavailable),
        "killed_at_s": round(killed, 2),
        "recovery_s": round(recovered - killed, 2) if recovered is not None else None,
        "service_pid_unchanged": service.process.poll() is None and service.process.pid == pid_before,
        "database_restarts": restarts,
        "new_postmaster_pid": postmaster_pid(service.data_dir),
    }
    result["checks"] = {
        "saw the outage (503s)": len(unavailable) > 0,
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "503s are fast (p99 < 2 s)": bool(unavailable) and result["503_latency_s"]["p99"] < 2.0 * p.slack,
        "503s say what is wrong": result["503_with_detail"],
        "recovered without a service restart": recovered is not None and result["service_pid_unchanged"],
        "the service restarted PostgreSQL": (restarts or 0) >= 1 and result["new_postmaster_pid"] != pg_pid,
    }
    return result


async def scenario_embedding(ctx: Context) -> Result:
    """The embedding server: ok, 500s, hanging, ok again; uploads and searches through all four."""
    service, p, server = ctx.service, ctx.params, ctx.embeddings
    assert service is not None
    reset_s = p.embed_timeout_s * 2  # EMBEDDING_BREAKER_RESET_S of the run's service
    phases = [
        ("ok", p.phase_s),
        ("error", p.phase_s),
        ("hang", p.phase_s + 2 * p.embed_timeout_s),
        ("recovered", (p.phase_s + reset_s) * p.slack),  # long enough to see the recovery
    ]
    ops = [
        ("embed", upload_op(ctx.user, "emb")),
        ("query_multiple", search_op(ctx.user, ctx.files, fresh=True)),
    ]
    clients = max(2, p.clients // 2)
    t0 = time.monotonic()
    current = {"phase": "ok"}
    began: dict[str, float] = {}
    samples: list[Sample] = []
    for phase, seconds in phases:
        server.mode = "ok" if phase == "recovered" else phase
        current["phase"] = phase
        began[phase] = time.monotonic() - t0
        say(f"embedding: server {server.mode!r} for {seconds:g} s, {clients} clients uploading and searching")
        samples += await run_clients(service.base_url, ops, clients, seconds, t0, lambda: current["phase"])
    by_phase: dict[str, Any] = {}
    for phase, _ in phases:
        mine = [s for s in samples if s.tag == phase]
        by_phase[phase] = {
            "requests": len(mine),
            "statuses": statuses(mine),
            "latency_s": summarize([s.latency for s in mine]),
            "answers": dict(Counter(f"{s.op} {s.status} {s.detail[:70]}" for s in mine).most_common(6)),
        }
    broken = [s for s in samples if s.tag in ("error", "hang") and s.start > began[s.tag] + 0.5]
    hang = [s for s in broken if s.tag == "hang"]
    after = [s for s in samples if s.tag == "recovered"]
    first_ok = min((s.end for s in after if s.status == 200), default=None)
    recovery_s = first_ok - began["recovered"] if first_ok is not None else None
    healthy = [s for s in samples if s.tag == "ok"] + [
        s for s in after if first_ok is not None and s.start > first_ok
    ]
    # two attempts of EMBEDDING_TIMEOUT and a backoff, for the calls that were in flight
    bound = 2 * p.embed_timeout_s + 3.0
    result: Result = {
        "phases": by_phase,
        "provider_requests": dict(server.requests),
        "recovery_s": round(recovery_s, 2) if recovery_s is not None else None,
        "other_5xx_or_no_answer": len(bad_5xx(samples)),
    }
    result["checks"] = {
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "while broken, every answer is 503 with a detail": bool(broken)
        and all(s.status == 503 and "embedding" in s.detail.lower() for s in broken),
        f"a hanging provider costs at most ~{bound:g} s a request": bool(hang)
        and max(s.latency for s in hang) < bound * p.slack,
        "answers are 200 again within the breaker's pause": recovery_s is not None
        and recovery_s < (reset_s + 2 * p.embed_timeout_s + 2) * p.slack,
        "healthy phases answer 200": bool(healthy) and all(s.status == 200 for s in healthy),
    }
    return result


async def scenario_stalls(ctx: Context) -> Result:
    """Half-sent requests: each is answered 408 and closed after its timeout; the service stays usable."""
    service, p = ctx.service, ctx.params
    assert service is not None
    token = make_token(JWT_SECRET, ctx.user)
    say(
        f"stalls: opening {p.stalled} connections that stop mid-headers or mid-body "
        f"(timeouts {p.stall_timeout_s:g} s)"
    )
    conns: list[tuple[str, asyncio.StreamReader, asyncio.StreamWriter]] = []
    for i in range(p.stalled):
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        if i % 2 == 0:
            kind = "headers"
            writer.write(b"POST /query HTTP/1.1\r\nHost: faults\r\nContent-Type: application/json\r\n")
        else:
            kind = "body"
            writer.write(
                b"POST /query HTTP/1.1\r\nHost: faults\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {token}\r\nContent-Length: 500\r\n\r\n".encode()
                + b'{"query": "sto'
            )
        await writer.drain()
        conns.append((kind, reader, writer))
    opened = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as http:
        health = (await http.get(f"{service.base_url}/health")).status_code

    async def outcome(reader: asyncio.StreamReader) -> tuple[bytes, float]:
        data = b""
        try:
            async with asyncio.timeout(p.stall_timeout_s + 20):
                while chunk := await reader.read(65536):
                    data += chunk
        except TimeoutError:
            return b"STILL OPEN", -1.0
        except OSError:
            pass
        return data, time.monotonic() - opened

    answers = await asyncio.gather(*(outcome(r) for _, r, _ in conns))
    for _, _, writer in conns:
        writer.close()
    still_open = sum(1 for data, _ in answers if data == b"STILL OPEN")
    got_408 = sum(1 for data, _ in answers if data.startswith(b"HTTP/1.1 408 "))
    closed_after = [t for _, t in answers if t >= 0]
    result: Result = {
        "connections": p.stalled,
        "answered_408_and_closed": got_408,
        "still_open_after_timeout_plus_20s": still_open,
        "closed_after_s": summarize(closed_after),
        "health_while_stalled": health,
    }
    result["checks"] = {
        "every stalled request is answered 408 and closed": got_408 == p.stalled and still_open == 0,
        "closed soon after the timeout": bool(closed_after)
        and max(closed_after) < (p.stall_timeout_s + 5) * p.slack,
        "the service kept serving": health == 200,
    }
    return result


async def scenario_s3(ctx: Context) -> Result:
    """SeaweedFS killed during uploads, then started again."""
    assert ctx.service is not None
    weed = SeaweedFS(ctx.root / "seaweedfs")
    say("s3: starting SeaweedFS")
    await asyncio.to_thread(weed.start)
    creds = json.loads((ctx.service.data_dir / "postgres-credentials.json").read_text())
    port = (ctx.service.data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[3]
    dsn = f"postgresql://ragoverlay:{creds['password']}@127.0.0.1:{port}/ragoverlay"
    service = ctx.new_service(
        "service-s3", ctx.root / "data-s3", DATABASE_URL=dsn, COLLECTION_NAME="faults_s3", **weed.env()
    )
    try:
        await service.start(within_s=120)
        seeded = await seed_on(service, ctx.user, 2)
        samples, tail, restart_s = await _through_an_s3_outage(ctx, service, weed, seeded)
        client = weed.client()
        try:  # the originals stored before the crash are still there
            listing = await asyncio.to_thread(
                client.list_objects_v2, Bucket=weed.bucket, Prefix="ragoverlay/originals/"
            )
            originals_after = int(listing.get("KeyCount", 0))
        finally:
            client.close()
    finally:
        await service.stop()
        weed.kill()
    return _s3_result(samples, tail, restart_s, originals_after, len(seeded))


async def _through_an_s3_outage(
    ctx: Context, service: ServiceProcess, weed: SeaweedFS, seeded: list[str]
) -> tuple[list[Sample], list[Sample], float]:
    """Clients upload and search while SeaweedFS is up, killed, started again; then one uploads on.

    Every sample (tagged with its phase), those after the restart, and the seconds the restart took.
    """
    p = ctx.params
    ops = [
        ("embed", upload_op(ctx.user, f"s3-{secrets.token_hex(3)}")),
        ("query_multiple", search_op(ctx.user, seeded, fresh=False)),
    ]
    t0 = time.monotonic()
    phase = {"name": "up"}
    clients = max(2, p.clients // 2)
    say(
        f"s3: {clients} clients uploading and searching; SeaweedFS killed at {p.s3_s / 3:g} s, "
        f"started again at {2 * p.s3_s / 3:g} s"
    )

    async def breaker() -> float:
        await asyncio.sleep(p.s3_s / 3)
        phase["name"] = "down"
        await asyncio.to_thread(weed.kill)
        await asyncio.sleep(p.s3_s / 3)
        phase["name"] = "restarting"
        took = await asyncio.to_thread(weed.start)
        phase["name"] = "back"
        return took

    load = asyncio.create_task(run_clients(service.base_url, ops, clients, p.s3_s, t0, lambda: phase["name"]))
    restart_s = await breaker()
    samples = await load
    # after the restart, keep uploading until one succeeds (bounded)
    tail = await run_clients(service.base_url, ops[:1], 1, 5.0, t0, lambda: "after")
    return samples + tail, tail, restart_s


def _s3_result(
    samples: list[Sample], tail: list[Sample], restart_s: float, originals_after: int, seeded: int
) -> Result:
    """What the clients saw in each phase of the S3 outage, and the scenario's checks."""
    by_phase = {
        name: {
            "statuses": statuses([s for s in samples if s.tag == name]),
            "latency_s": summarize([s.latency for s in samples if s.tag == name]),
        }
        for name in ("up", "down", "restarting", "back", "after")
    }
    down_uploads = [s for s in samples if s.tag == "down" and s.op == "embed"]
    down_searches = [s for s in samples if s.tag == "down" and s.op == "query_multiple"]
    result: Result = {
        "phases": by_phase,
        "seaweedfs_restart_s": round(restart_s, 1),
        "originals_in_bucket_after": originals_after,
        "other_5xx_or_no_answer": len(bad_5xx(samples)),
    }
    result["checks"] = {
        "no 500 and no dropped request": result["other_5xx_or_no_answer"] == 0,
        "uploads while S3 is down answer 502/503 with a detail": bool(down_uploads)
        and all(s.status in (502, 503) and s.detail for s in down_uploads),
        "searches go on while S3 is down": bool(down_searches)
        and all(s.status == 200 for s in down_searches),
        "uploads work again after the restart": any(s.status == 200 and s.op == "embed" for s in tail),
        "originals stored before the crash survive it": originals_after >= seeded,
    }
    return result


async def scenario_datadir(ctx: Context) -> Result:
    """Two services on one DATA_DIR: the second refuses; after the first dies, a new one adopts the data."""
    first = ctx.service
    assert first is not None and first.process is not None
    say("datadir: a second service on the same DATA_DIR")
    second = ctx.new_service("service-second", first.data_dir)
    env = second.environment()
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app"],
        cwd=str(first.data_dir),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    async with httpx.AsyncClient(timeout=10) as http:
        first_health = (await http.get(f"{first.base_url}/health")).status_code
    say(f"datadir: second exited {proc.returncode}: {message}")
    say(
        "datadir: SIGKILL to the first service (its PostgreSQL keeps running); "
        "a new service on the same DATA_DIR"
    )
    pg_pid = postmaster_pid(first.data_dir)
    first.process.kill()
    await asyncio.to_thread(first.process.wait, 30)
    third = ctx.new_service("service-third", first.data_dir)
    took = await third.start(within_s=120)
    ctx.service = third  # what later scenarios use
    async with httpx.AsyncClient(base_url=third.base_url, timeout=30) as http:
        hits = await http.post(
            "/query_multiple", json={"query": "storm", "file_ids": ctx.files, "k": 3}, headers=auth(ctx.user)
        )
    result: Result = {
        "second_exit_code": proc.returncode,
        "second_message": message,
        "first_health_meanwhile": first_health,
        "adopted_postgres_pid": postmaster_pid(first.data_dir),
        "killed_service_postgres_pid": pg_pid,
        "new_service_healthy_after_s": round(took, 1),
        "data_after_adoption": hits.status_code,
    }
    result["checks"] = {
        "the second service refused to start, naming the folder": proc.returncode == 2
        and "is in use by process" in message,
        "the first kept serving": first_health == 200,
        "a new service adopted the running database and its data": hits.status_code == 200
        and result["adopted_postgres_pid"] == pg_pid,
    }
    return result
