"""`python -m app`: run the service with uvicorn on the configured host and port."""

from __future__ import annotations

import sys

import uvicorn

from app.config import load_settings
from app.errors import ConfigError
from app.main import UNAUTHENTICATED_WARNING, create_app


def main() -> int:
    """Validate the configuration, then serve until interrupted."""
    try:
        settings = load_settings()
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
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.bind_host,
        port=settings.port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        timeout_graceful_shutdown=30,
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
