#!/usr/bin/env python3
"""Provision LibreChat knowledge bases from a plan, through LibreChat's own HTTP API only.

Usage:
    provision_knowledge_bases.py PLAN [--state PATH] [--skip-uploads] [--json PATH]
                                 [--max-attempts N] [--backoff-base S] [--backoff-cap S]

For each knowledge base of the plan (YAML or JSON): find or create the group and the Agent by exact
name, share the Agent with the group as viewer, upload every file of the folder into the Agent's
`file_search` resource (requiring `embedded: true`), then verify: per knowledge base the expected
file count, every file embedded, sharing as planned, and knowledge bases pairwise disjoint.

A state file, rewritten atomically after every upload and bound to the plan's base URL, remembers
each file by name and SHA-256: a re-run uploads only new or changed files, and a run that crashed
resumes without uploading anything twice (an upload that may have landed is looked up first).
`--skip-uploads` changes nothing in LibreChat and only verifies.

Credentials come from LIBRECHAT_ADMIN_EMAIL and LIBRECHAT_ADMIN_PASSWORD, or a prompt; never from
the plan.

Exit codes: 0 provisioned and verified; 1 verification found a problem; 2 bad plan, arguments,
state file or credentials; 3 LibreChat unreachable, login or preflight refused, or a request failed
after its retries.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a file from any folder
    sys.path.insert(0, str(REPO_ROOT))


def _use_project_venv() -> None:
    """Started by another Python that lacks our dependencies: re-run with the project's .venv."""
    venv = REPO_ROOT / ".venv"
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        # a fresh clone: say how to get the .venv, instead of ending in ModuleNotFoundError
        name = Path(__file__).name
        sys.exit(
            f"{name} needs ragoverlay's dependencies, which this Python ({sys.executable}) lacks, and "
            f"{venv} does not exist yet: run scripts/serve or scripts/test once (either creates it), "
            f"then run {name} again"
        )
    if Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606


try:
    import httpx
    import yaml  # noqa: F401  (scripts/provisioning/plan.py reads the plan with it)
except ImportError:  # pragma: no cover - depends on how the script was started
    _use_project_venv()
    raise  # .venv exists and was used, yet lacks them: the import error is the honest answer

# the parts (scripts/provisioning/), once the dependencies are there
from app.progress_display import write_line  # noqa: E402
from scripts.provisioning.librechat import LibreChat, LibreChatError, RetryPolicy  # noqa: E402
from scripts.provisioning.plan import EMAIL_ENV, PASSWORD_ENV, PlanError, load_plan  # noqa: E402
from scripts.provisioning.provisioner import Provisioner, RunReport  # noqa: E402
from scripts.provisioning.state import State  # noqa: E402

EXIT_OK, EXIT_VERIFY, EXIT_USAGE, EXIT_LIBRECHAT = 0, 1, 2, 3

# --------------------------------------------------------------------------- command line


def credentials(environ: Mapping[str, str], *, interactive: bool) -> tuple[str, str]:
    """Admin email and password from the environment, else a prompt (never from the plan)."""
    email, password = environ.get(EMAIL_ENV, "").strip(), environ.get(PASSWORD_ENV, "")
    if (not email or not password) and not interactive:
        raise PlanError(f"set {EMAIL_ENV} and {PASSWORD_ENV} (no terminal to prompt on)")
    if not email:
        email = input("LibreChat admin email: ").strip()
    if not password:
        password = getpass.getpass("LibreChat admin password: ")
    if not email or not password:
        raise PlanError("an admin email and password are needed")
    return email, password


def print_report(report: RunReport, out: Callable[[str], None]) -> None:
    """The human summary."""
    mode = "verify only" if report.skip_uploads else "provision + verify"
    out(f"\nLibreChat {report.base_url} ({mode})")
    for kb in report.knowledge_bases:
        status = "OK" if not kb.problems else "PROBLEM"
        out(
            f"  [{status}] {kb.name} ({kb.agent_id or 'no Agent'}): "
            f"{kb.attached_files}/{kb.expected_files} files; "
            f"uploaded {len(kb.uploaded)}, unchanged {len(kb.skipped)}, recovered {len(kb.recovered)}, "
            f"replaced {len(kb.replaced)}"
        )
        for problem in kb.problems:
            out(f"      - {problem}")
    for problem in report.problems:
        out(f"  [PROBLEM] {problem}")
    out("All knowledge bases verified." if report.ok else "Verification FAILED.")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("plan", type=Path, help="plan file (YAML or JSON)")
    parser.add_argument(
        "--state",
        type=Path,
        help="state file (default: the plan's state_file, else <plan>.state.json next to the plan)",
    )
    parser.add_argument("--skip-uploads", action="store_true", help="change nothing; only verify")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the report as JSON here")
    parser.add_argument(
        "--max-attempts", type=int, default=5, help="attempts per request on 429/5xx (default 5)"
    )
    parser.add_argument(
        "--backoff-base", type=float, default=1.0, help="first retry delay in seconds (default 1)"
    )
    parser.add_argument(
        "--backoff-cap", type=float, default=30.0, help="longest retry delay in seconds (default 30)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per request (uploads embed synchronously)"
    )
    args = parser.parse_args(argv)
    if args.max_attempts < 1 or args.backoff_base < 0 or args.backoff_cap < 0:
        parser.error("--max-attempts must be at least 1 and the backoff values non-negative")
    return args


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run the command; returns the exit code."""
    args = parse_args(argv)
    env = os.environ if environ is None else environ

    def log(message: str) -> None:
        write_line(message, sys.stdout)

    try:
        plan = load_plan(args.plan)
        state_path = args.state or plan.state_file or args.plan.with_name(args.plan.stem + ".state.json")
        state = State.load(state_path, plan.base_url)
        email, password = credentials(env, interactive=sys.stdin.isatty())
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    policy = RetryPolicy(attempts=args.max_attempts, base_s=args.backoff_base, cap_s=args.backoff_cap)
    api = LibreChat(plan.base_url, policy=policy, log=log, timeout_s=args.timeout, transport=transport)
    try:
        api.health()
        api.login(email, password)
        api.preflight()
        report = Provisioner(plan, api, state, log=log).run(skip_uploads=args.skip_uploads)
    except LibreChatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LIBRECHAT
    finally:
        api.close()
    print_report(report, log)
    if args.json_path:
        args.json_path.write_text(
            json.dumps(asdict(report) | {"ok": report.ok}, indent=2) + "\n", encoding="utf-8"
        )
    return EXIT_OK if report.ok else EXIT_VERIFY


if __name__ == "__main__":
    sys.exit(main())
