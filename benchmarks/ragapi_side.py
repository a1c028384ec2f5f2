"""rag_api itself as a benchmark side: a pinned release, its own venv, run live on our database.

The release is exported with `git archive` from a git directory (a clone or a bare mirror of
danny-avila/rag_api: `--rag-api DIR`; with no directory a bare clone is made from GitHub) into
`~/.cache/ragoverlay/bench-ragapi/<commit>/src`, and its `requirements.lite.txt` installed into
`<commit>/venv` from PyPI. Both are kept: the next run starts at once, and needs no git directory.

What is left out: rag_api ships two requirement files. `requirements.txt` adds `sentence_transformers`
and `langchain-huggingface` (and through them torch, about 2 GB) for its local embedding providers
(`huggingface`, `huggingfacetei`'s client is plain HTTP); `requirements.lite.txt` is the same list
without them and is what its own `Dockerfile.lite` installs. The OpenAI provider path the benchmark
uses imports neither, so the lite file is installed as pinned, nothing else removed or added. Two
settings keep it offline: `RAG_CHECK_EMBEDDING_CTX_LENGTH=false` (else langchain-openai fetches a
tiktoken vocabulary from the internet on the first query) and no MongoDB (`VECTOR_DB_TYPE=pgvector`).
Its optional btree indexes (`PGVECTOR_CREATE_LEGACY_INDEXES=true`) are created: its faster setting;
the comparison then runs ANALYZE, so the planner has statistics for the `file_id` expression index.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from benchmarks.progress import Progress
from benchmarks.service import MemorySampler, free_port, track, untrack

PIN_TAG = "v0.9.0"
PIN_COMMIT = "4985b37b8b5d4519d68eceedfef1e63624012f9d"
UPSTREAM = "https://github.com/danny-avila/rag_api.git"
REQUIREMENTS = "requirements.lite.txt"
LEFT_OUT = ("sentence_transformers==3.1.1", "langchain-huggingface==1.2.2")
CACHE = Path.home() / ".cache" / "ragoverlay" / "bench-ragapi"
INSTALL_TIMEOUT_S = 1800.0
DONE_MARKER = "installed.ok"


@dataclass(frozen=True)
class RagApiInstall:
    """A pinned rag_api release with its own interpreter."""

    tag: str
    commit: str
    src: Path
    python: Path

    def facts(self) -> dict[str, Any]:
        """What the report records about it."""
        return {
            "tag": self.tag,
            "commit": self.commit,
            "requirements": REQUIREMENTS,
            "left_out": list(LEFT_OUT),
            "folder": str(self.src.parent),
        }


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _source_git_dir(given: Path | None, progress: Progress) -> Path:
    """A git directory holding the pinned commit: `given`, or a bare clone of upstream in the cache."""
    if given is not None:
        dot_git = given / ".git"
        return dot_git if dot_git.is_dir() else given
    mirror = CACHE / "upstream.git"
    if not mirror.exists():
        with progress.phase("rag_api: bare clone of upstream"):
            subprocess.run(["git", "clone", "--bare", UPSTREAM, str(mirror)], check=True)
    return mirror


def ensure_installed(git_dir: Path | None, progress: Progress) -> RagApiInstall:
    """The pinned release exported and installed once; later runs reuse the folder as it is."""
    folder = CACHE / PIN_COMMIT
    src, venv = folder / "src", folder / "venv"
    install = RagApiInstall(PIN_TAG, PIN_COMMIT, src, venv / "bin" / "python")
    if (folder / DONE_MARKER).exists():
        return install
    source = _source_git_dir(git_dir, progress)
    if _git(source, "rev-parse", f"{PIN_TAG}^{{commit}}") != PIN_COMMIT:
        raise RuntimeError(f"{PIN_TAG} in {source} is not commit {PIN_COMMIT}")
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    with progress.phase(f"rag_api: git archive {PIN_TAG} ({PIN_COMMIT[:10]})"):
        archive = subprocess.run(
            ["git", f"--git-dir={source}", "archive", PIN_COMMIT], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    with progress.phase(f"rag_api: its venv, pip install -r {REQUIREMENTS} (minutes, once)"):
        if not install.python.exists():
            subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(install.python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "-r",
                str(src / REQUIREMENTS),
            ],
            check=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    (folder / DONE_MARKER).write_text(PIN_COMMIT + "\n")
    return install


def ragapi_environment(dsn: str, secret: str, embed_url: str, collection: str, port: int) -> dict[str, str]:
    """rag_api's settings for our database, our JWT secret and the embedding stub (pure)."""
    url = urlsplit(dsn)
    return {
        "VECTOR_DB_TYPE": "pgvector",
        "POSTGRES_DB": unquote(url.path.lstrip("/")),
        "POSTGRES_USER": unquote(url.username or ""),
        "POSTGRES_PASSWORD": unquote(url.password or ""),
        "DB_HOST": url.hostname or "127.0.0.1",
        "DB_PORT": str(url.port or 5432),
        "COLLECTION_NAME": collection,
        "JWT_SECRET": secret,
        "EMBEDDINGS_PROVIDER": "openai",
        "EMBEDDINGS_MODEL": "text-embedding-3-small",
        "RAG_OPENAI_API_KEY": "bench-stand-in",
        "RAG_OPENAI_BASEURL": embed_url,
        "RAG_CHECK_EMBEDDING_CTX_LENGTH": "false",
        "PGVECTOR_CREATE_LEGACY_INDEXES": "true",
        "PGVECTOR_CREATE_EXTENSION": "false",  # the benchmark's schema made it
        "RAG_HOST": "127.0.0.1",
        "RAG_PORT": str(port),
        "SCARF_NO_ANALYTICS": "true",
    }


@dataclass(eq=False)
class RagApiProcess:
    """`uvicorn main:app` of the pinned release, one process as its Dockerfile runs it."""

    install: RagApiInstall
    settings: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    sampler: MemorySampler | None = None

    @property
    def base_url(self) -> str:
        """Where it listens."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """Its process id (started)."""
        assert self.process is not None
        return self.process.pid

    async def start(self, within_s: float = 180.0) -> float:
        """Start it and wait for `GET /health` -> UP; seconds to healthy."""
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(self.settings, RAG_PORT=str(self.port), PYTHONUNBUFFERED="1")
        uploads = self.log_path.parent / "ragapi-uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        env["RAG_UPLOAD_DIR"] = str(uploads)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
                [
                    str(self.install.python),
                    "-m",
                    "uvicorn",
                    "main:app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--no-access-log",
                ],
                cwd=str(self.install.src),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        track(self)  # `terminate_all` stops it if the run breaks off
        self.sampler = MemorySampler(self.process.pid)
        self.sampler.start()
        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"rag_api exited with {self.process.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    reply = await client.get(f"{self.base_url}/health")
                    body = reply.json()
                    if reply.status_code == 200 and isinstance(body, dict) and body.get("status") == "UP":
                        return time.perf_counter() - t0
                if time.perf_counter() - t0 > within_s:
                    raise RuntimeError(f"rag_api not healthy after {within_s:.0f} s:\n{self.log_tail()}")
                await asyncio.sleep(0.3)

    async def stop(self) -> dict[str, Any]:
        """SIGTERM (SIGKILL after 20 s); its peak memory and exit code."""
        facts: dict[str, Any] = {}
        if self.sampler is not None:
            self.sampler.stop()
            facts["peak_rss_sampled_bytes"] = self.sampler.peak_rss
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)
        facts["exit_code"] = proc.returncode if proc is not None else None
        untrack(self)
        return facts

    def kill_now(self) -> None:
        """Synchronous last resort."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of its log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
