"""A benchmark's run on its own embedded PostgreSQL: started, used, and always stopped and cleaned up."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from app.runtime.postgres import EmbeddedInfo, EmbeddedPostgres
from benchmarks.progress import Progress
from benchmarks.service import terminate_all


def run_on_embedded_postgres(
    root: Path,
    temporary: bool,
    progress: Progress,
    result: dict[str, Any],
    bench: Callable[[EmbeddedInfo], Coroutine[Any, Any, None]],
) -> int:
    """Start the server in `root`/postgres, run `bench` on it, then stop every service and the server
    (and delete `root` when `temporary`), also on SIGTERM. 0; 1 on an error (`result["error"]`); 130
    when interrupted (`result["interrupted"]`). Records the end's load average, phases and total."""
    server = EmbeddedPostgres(root / "postgres")
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    code = 0
    try:
        with progress.phase("postgres: start"):
            info = server.start()
        asyncio.run(bench(info))
    except KeyboardInterrupt:
        progress.say("interrupted: stopping the service and the database")
        result["interrupted"] = True
        code = 130
    except Exception as exc:
        progress.say(f"failed: {type(exc).__name__}: {exc}")
        result["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        terminate_all()
        with progress.phase("postgres: stop"):
            server.stop()
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["phases"] = progress.phases
    result["total_s"] = round(progress.elapsed(), 1)
    return code


def raise_interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop as Ctrl-C does, so the cleanup runs."""
    raise KeyboardInterrupt
