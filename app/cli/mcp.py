"""`python -m app.cli.mcp` (`scripts/mcp`): the MCP tools over stdio, for one principal, on the
service's data.

    scripts/mcp --principal alice --namespace alice --namespace agent_kb

The same settings as `scripts/serve` (environment, .env). With the embedded PostgreSQL it connects
to the server the running service owns (its port from postmaster.pid, its credentials file) and
refuses to start when no service runs: it never starts a second server on that folder. With
DATABASE_URL it connects there. It runs no background jobs (INDEXER_CONCURRENCY=0 here): the
service's workers do that work, and `rag_reindex` queues for them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from app.config import load_settings
from app.errors import ConfigError
from app.main import create_app
from app.mcp.auth import stdio_caller
from app.mcp.server import build_server


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line: one principal, and the namespaces it reads."""
    parser = argparse.ArgumentParser(
        prog="scripts/mcp",
        description="Serve ragoverlay's MCP tools over stdio as one principal (never as everyone).",
    )
    parser.add_argument(
        "--principal",
        required=True,
        help="who the calls act as (a LibreChat user id, or a service name); admins are RAG_ADMIN_USER_IDS",
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="a namespace (user or Agent id) the principal reads; repeat it; default: the principal's own",
    )
    return parser.parse_args(argv)


async def serve(principal: str, namespaces: Sequence[str]) -> None:
    """Open the service's resources as a client of its database, then answer on stdin/stdout."""
    settings = load_settings(indexer_concurrency=0)
    caller = stdio_caller(frozenset(settings.admin_user_ids), principal, namespaces)
    app = create_app(settings, attach_database=True)
    async with app.router.lifespan_context(app):
        server = build_server(app.state.services, stdio=caller)
        await server.run_stdio_async()


def main(argv: Sequence[str] | None = None) -> int:
    """Run until stdin closes; 2 with a sentence on stderr when the configuration cannot work."""
    args = parse_args(argv)
    try:
        asyncio.run(serve(args.principal, args.namespace))
    except (ConfigError, ValueError) as exc:
        print(f"scripts/mcp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
