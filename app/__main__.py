"""`python -m app`: run the service with uvicorn on the configured host and port."""

from __future__ import annotations

import errno
import socket
import sys

import uvicorn

from app.config import load_settings
from app.errors import ConfigError
from app.main import UNAUTHENTICATED_WARNING, create_app
from app.runtime.lock import FolderLock
from app.runtime.postgres import LOCK_NAME, LOCK_PURPOSE
from app.runtime.request_timeouts import stall_guarded_protocol
from app.runtime.workers import serve_workers, worker_count

LISTEN_BACKLOG = 2048  # uvicorn's default


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or ConfigError naming the port.

    Bound before anything else starts, so a busy port is reported at once rather than after the
    embedded database was initialised and migrated; uvicorn then serves on this very socket.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # as uvicorn does: a port in TIME_WAIT after a restart is free, one with a listener is not
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use: stop the program listening there, or set "
                "RAG_PORT (or PORT) to a free port"
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or type(exc).__name__}); check RAG_HOST "
            "and RAG_PORT"
        ) from None
    return sock


def main() -> int:
    """Validate the configuration, claim the port, then serve until interrupted."""
    try:
        settings = load_settings()
        if settings.use_embedded_postgres:
            # claimed before the port, and held until exit: a second service on this DATA_DIR stops
            # here with the owner's pid, instead of sharing (and later losing) a database it does not own
            FolderLock.acquire(settings.data_dir.resolve(), LOCK_NAME, purpose=LOCK_PURPOSE)
        listener = bind_listener(settings.bind_host, settings.port)
    except ConfigError as exc:
        print(f"ragoverlay: {exc}", file=sys.stderr)
        return 2
    if not settings.auth_enabled:
        banner = "!" * 78
        where = (
            "listening on loopback only (set ALLOW_UNAUTHENTICATED=true to bind RAG_HOST)"
            if not settings.allow_unauthenticated
            else f"listening on {settings.host} because ALLOW_UNAUTHENTICATED=true"
        )
        print(f"{banner}\n{UNAUTHENTICATED_WARNING}\nragoverlay is {where}.\n{banner}", file=sys.stderr)
    workers = worker_count(settings.workers, settings.vector_cache_mb)
    if workers > 1:
        # the parent owns the database and the port; the workers build the app (app/runtime/workers.py)
        with listener:
            return serve_workers(settings, listener, workers)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.bind_host,
        port=settings.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        timeout_graceful_shutdown=30,
        server_header=False,
        backlog=LISTEN_BACKLOG,
        # headers that stall are cut after REQUEST_HEADER_TIMEOUT_S (uvicorn itself never cuts them)
        http=stall_guarded_protocol(settings.request_header_timeout_s),
    )
    with listener:
        uvicorn.Server(config).run(sockets=[listener])
    return 0


if __name__ == "__main__":
    sys.exit(main())
