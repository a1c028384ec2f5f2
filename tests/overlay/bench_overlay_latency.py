"""Search latency of the LibreChat overlay over a 2,500-file knowledge base, against scripts/serve.

Not a test (pytest does not collect it): a measurement to run by hand, from the repository root,
after `bash tests/node/run.sh --install-only`:

    .venv/bin/python -m tests.overlay.bench_overlay_latency [--files 2500] [--runs 30]

It starts `scripts/serve` on embedded defaults in a temporary folder, uploads the files through
`/embed` under one Agent (each a few chunks of distinct text), then times the overlay's `file_search`
call (token, batched requests, merge) from node, talking to the service directly. It prints the
latency per concurrency setting and, for comparison, one request for the first 1,000 files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.serve import free_port, serving
from tests.overlay.test_overlay_e2e import DRIVER, SECRET, make_token

AGENT = "agent_bench_kb"
USER = "user-bench"
TOPICS = (
    "invoices and billing cycles",
    "warranty claims for kitchen appliances",
    "onboarding of new employees",
    "travel expense reimbursement",
    "data retention and backups",
    "office opening hours and holidays",
    "security training and passwords",
    "shipping times for international orders",
)
QUERY = "How long do customers have to file a warranty claim for a kitchen appliance?"


def document(index: int) -> str:
    """A file of about 3,000 characters (two or three chunks) on one topic, with its own numbers."""
    topic = TOPICS[index % len(TOPICS)]
    paragraphs = [
        f"Document {index}: policy notes on {topic}. Section {part} explains the rules for {topic} "
        f"that apply from year {2000 + index % 25}, with a limit of {(index * 7 + part) % 90 + 10} days "
        f"and a contact in team {index % 40}. Exceptions are reviewed by the {topic} committee, which "
        f"meets every {part + 1} weeks and records its decisions in register {index}-{part}."
        for part in range(6)
    ]
    return "\n\n".join(paragraphs)


def upload_all(service: str, count: int, workers: int) -> list[str]:
    """Upload `count` files to the Agent's namespace, `workers` at a time; return their ids."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    token = make_token(USER, lifetime_s=3600)

    def one(item: tuple[int, str]) -> None:
        index, file_id = item
        response = httpx.post(
            f"{service}/embed",
            data={"file_id": file_id, "entity_id": AGENT},
            files={"file": (f"doc-{index}.txt", document(index).encode(), "text/plain")},
            headers={"Authorization": f"Bearer {token}"},
            timeout=300.0,
        )
        response.raise_for_status()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, enumerate(ids)))
    return ids


def time_searches(
    service: str, secret: str, file_ids: list[str], runs: int, **settings: str
) -> dict[str, Any]:
    """Run the overlay `runs` times in one node process; return its timings and last result."""
    scenario = {
        "userId": USER,
        "entity_id": AGENT,
        "query": QUERY,
        "files": [
            {"file_id": fid, "filename": f"{i}.txt", "fromAgent": True} for i, fid in enumerate(file_ids)
        ],
        "repeat": runs,
    }
    env = {**os.environ, "RAG_API_URL": service, "JWT_SECRET": secret, **settings}
    result = subprocess.run(
        ["node", str(DRIVER)],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def summary(timings: list[float]) -> str:
    """p50 / p95 / min / max of the timings after the first (warm-up) run."""
    warm = sorted(timings[1:])
    p95 = warm[max(0, round(0.95 * len(warm)) - 1)]
    return (
        f"p50 {statistics.median(warm):.0f} ms, p95 {p95:.0f} ms, min {warm[0]:.0f} ms, "
        f"max {warm[-1]:.0f} ms (n={len(warm)})"
    )


def main() -> None:
    """Start the service, upload, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2500)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--upload-workers", type=int, default=4)
    args = parser.parse_args()

    # make_token signs with the e2e module's secret, so the service gets the same one.
    secret = SECRET
    with tempfile.TemporaryDirectory(prefix="overlay-bench-") as tmp:
        data_dir = Path(tmp)
        port = free_port()
        env = {
            **os.environ,
            "RAG_HOST": "127.0.0.1",
            "RAG_PORT": str(port),
            "JWT_SECRET": secret,
            "DATA_DIR": str(data_dir),
        }
        service = f"http://127.0.0.1:{port}"
        with serving(env, data_dir / "serve.log", timeout_s=300.0):
            started = time.monotonic()
            file_ids = upload_all(service, args.files, args.upload_workers)
            print(f"uploaded {len(file_ids)} files in {time.monotonic() - started:.0f} s")
            # Let background statistics and the vector copy settle before timing.
            time.sleep(5)
            for concurrency in ("4", "2", "1"):
                output = time_searches(
                    service, secret, file_ids, args.runs, RAG_FILE_SEARCH_CONCURRENCY=concurrency
                )
                found = len(output["artifact"]["file_search"]["sources"]) if output["artifact"] else 0
                print(
                    f"{len(file_ids)} files, concurrency {concurrency}: {summary(output['timingsMs'])}; "
                    f"{found} results, {len(output['axiosErrors'])} errors"
                )
            single = time_searches(service, secret, file_ids[:1000], args.runs)
            print(f"1000 files (one request), for comparison: {summary(single['timingsMs'])}")


if __name__ == "__main__":
    main()
