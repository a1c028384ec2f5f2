#!/usr/bin/env python3
"""Prove against a live ragoverlay (or rag_api) deployment that no knowledge base sees another's files.

Usage:
    validate_deployment.py --rag-url URL [--seed] [--inventory FILE] [--state FILE]
                           [--mongo-uri URI [--plan PLAN]] [--queries FILE] [--v2]
                           [--tokens FILE] [--min-probes N] [--json PATH]

Tokens are minted with the JWT secret from the environment variable named by --jwt-secret-env
(default JWT_SECRET, the secret LibreChat and the service share), or taken ready-made from
--tokens (a JSON object {user_id: token}); the secret never goes on the command line.

What runs:
- isolation probes: every namespace (an Agent's knowledge base, or a user's own files) is queried
  with every other namespace's file ids, alone and in mixed batches, through /query,
  /query_multiple, /documents, /documents/{id}/context and /ids; nothing foreign may come back.
  A user's token without entity_id cannot read another user's files, nor by naming that user's id
  as entity_id (a 4xx answer or an answer with nothing of theirs passes). Positive controls check
  that each namespace does see its own files, so an empty service cannot pass.
- token probes: forged, expired, exp-less and `alg: none` tokens and a missing header answer 401;
- limit probes: 1,001 file ids and an empty list answer 400;
- grounded queries from --queries (JSON list or JSON lines of {query, file_ids, entity_id,
  expect_file, expect_text[, k, user_id]}) and from the seeded corpus;
- with --v2: /query_v2 answers an unanswerable question and a foreign file id with no results and
  the safe refusal (CONTRACT.md section 6 as the service implements it);
- with --mongo-uri: LibreChat's catalogue: knowledge-base file sets disjoint, no file attached to
  two Agents, every knowledge-base file embedded, no Agent shared publicly unless --plan allows it.

--seed uploads a small generated corpus (two Agents, two users) through /embed first, so an empty
deployment can be validated, and deletes it afterwards unless --keep-seed.

Prints a summary, writes the JSON report with --json. Exit codes: 0 every check passed; 1 a check
failed; 2 bad arguments or inputs; 3 the service or MongoDB could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
    import yaml  # noqa: F401  (scripts/validation/catalogue.py reads the plan with it)
except ImportError:  # pragma: no cover - depends on how the script was started
    _use_project_venv()
    raise  # .venv exists and was used, yet lacks them: the import error is the honest answer

# the parts (scripts/validation/), once the dependencies are there; the names imported `as`
# themselves are for tests/operator/test_validate_unit.py, which reaches them through this module
from scripts.validation.catalogue import catalogue_checks  # noqa: E402
from scripts.validation.checks import ProbeResult, run_probes  # noqa: E402
from scripts.validation.checks import grounded as grounded  # noqa: E402
from scripts.validation.checks import nothing_foreign as nothing_foreign  # noqa: E402
from scripts.validation.checks import reaches as reaches  # noqa: E402
from scripts.validation.checks import refused as refused  # noqa: E402
from scripts.validation.checks import v2_safe_refusal as v2_safe_refusal  # noqa: E402
from scripts.validation.inventory import (  # noqa: E402
    GroundedQuery,
    Namespace,
    Tokens,
    UsageError,
    load_inventory,
    load_queries,
    load_state,
)
from scripts.validation.planning import PROBE_QUERIES as PROBE_QUERIES  # noqa: E402
from scripts.validation.planning import build_probes  # noqa: E402
from scripts.validation.planning import plan_isolation_probes as plan_isolation_probes  # noqa: E402
from scripts.validation.planning import plan_token_probes as plan_token_probes  # noqa: E402
from scripts.validation.planning import plan_v2_probes as plan_v2_probes  # noqa: E402
from scripts.validation.planning import queries_for as queries_for  # noqa: E402
from scripts.validation.seeding import Seeded, delete_seed, seed_corpus  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

# --------------------------------------------------------------------------- report


def summarise(results: Sequence[ProbeResult]) -> dict[str, Any]:
    """Counts per probe kind and the failures (first 100)."""
    run = Counter(r.kind for r in results)
    failed = Counter(r.kind for r in results if r.error)
    return {
        "total": len(results),
        "passed": len(results) - sum(failed.values()),
        "failed": sum(failed.values()),
        "by_kind": {k: {"run": run[k], "failed": failed[k]} for k in sorted(run)},
        "failures": [
            {"kind": r.kind, "probe": r.description, "status": r.status, "error": r.error}
            for r in results
            if r.error
        ][:100],
    }


def print_summary(report: Mapping[str, Any], out: Callable[[str], None]) -> None:
    """The human summary."""
    probes = report["probes"]
    out(f"\nragoverlay deployment check: {report['rag_url']}")
    out(f"  probes run: {probes['total']}, passed: {probes['passed']}, failed: {probes['failed']}")
    for kind, counts in probes["by_kind"].items():
        mark = "ok" if not counts["failed"] else "FAILED"
        out(f"    {kind:18} {counts['run']:5} run, {counts['failed']:4} failed  {mark}")
    for failure in probes["failures"][:20]:
        out(f"    - [{failure['kind']}] {failure['probe']}: {failure['error']}")
    catalogue = report.get("catalogue")
    if catalogue:
        out(
            f"  catalogue: {catalogue['knowledge_bases']} knowledge base(s), "
            f"{catalogue['files_checked']} file(s)"
        )
        for finding in catalogue["findings"][:20]:
            out(f"    - [{finding['check']}] {finding['message']}")
    out("PASSED" if report["ok"] else "FAILED")


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rag-url", required=True, help="the RAG API's base URL")
    parser.add_argument(
        "--jwt-secret-env", default="JWT_SECRET", help="environment variable holding the JWT secret"
    )
    parser.add_argument("--tokens", type=Path, help="JSON object {user_id: token} of ready tokens")
    parser.add_argument(
        "--probe-user",
        help="user id the Agent probes act as: a user who uploaded none of the knowledge bases' "
        "files, since an uploader may read its own uploads (default: a fresh id)",
    )
    parser.add_argument("--seed", action="store_true", help="upload a generated probe corpus first")
    parser.add_argument("--keep-seed", action="store_true", help="do not delete the seeded corpus afterwards")
    parser.add_argument("--inventory", type=Path, help="JSON namespaces file to probe")
    parser.add_argument("--state", type=Path, help="a provision_knowledge_bases.py state file to probe")
    parser.add_argument("--mongo-uri", help="LibreChat's MongoDB URI: audit the catalogue and probe its KBs")
    parser.add_argument("--plan", type=Path, help="the provisioning plan (Agents allowed to be public)")
    parser.add_argument("--queries", type=Path, help="grounded queries (JSON list or JSON lines)")
    parser.add_argument("--v2", action="store_true", help="also probe /query_v2's safe refusal")
    parser.add_argument(
        "--min-probes",
        type=int,
        default=500,
        help="repeat isolation probes with more questions until at least this many probes run (default 500)",
    )
    parser.add_argument("--max-files", type=int, default=20, help="file ids per namespace used in probes")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--json", type=Path, dest="json_path", help="write the JSON report here")
    return parser.parse_args(argv)


def validate(
    args: argparse.Namespace, environ: Mapping[str, str], transport: httpx.BaseTransport | None
) -> dict[str, Any]:
    """Run everything the arguments ask for; the report."""
    if args.seed and args.v2:
        # the seeded Agents get fresh random ids, which the service's RAG_V2_NAMESPACE_IDS cannot list
        raise UsageError(
            "--seed and --v2 exclude each other: --v2 probes Agents the service has V2 enabled for "
            "(RAG_V2_NAMESPACE_IDS), and --seed creates Agents with fresh random ids that cannot be in "
            "that list; run --seed alone, and --v2 with --state, --inventory or --mongo-uri naming V2 Agents"
        )
    ready = None
    if args.tokens:
        try:
            ready = json.loads(args.tokens.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read tokens {args.tokens}: {exc}") from None
    tokens = Tokens(environ.get(args.jwt_secret_env) or None, ready)
    probe_user = args.probe_user or tokens.any_user()
    namespaces: list[Namespace] = []
    grounded_queries: list[GroundedQuery] = []
    report: dict[str, Any] = {"rag_url": args.rag_url}
    if args.inventory:
        namespaces += load_inventory(args.inventory)
    if args.state:
        namespaces += load_state(args.state)
    if args.queries:
        grounded_queries += load_queries(args.queries)
    if args.mongo_uri:
        report["catalogue"], from_catalogue = catalogue_checks(args.mongo_uri, args.plan)
        namespaces += from_catalogue
    with httpx.Client(base_url=args.rag_url.rstrip("/"), timeout=args.timeout, transport=transport) as client:
        try:
            health = client.get("/health")
        except httpx.HTTPError as exc:
            raise ConnectionError(f"{args.rag_url}: {type(exc).__name__}") from None
        if health.status_code != 200:
            raise ConnectionError(f"{args.rag_url}/health answered {health.status_code}")
        seeded: Seeded | None = None
        if args.seed:
            if not tokens.can_mint():
                raise UsageError("--seed needs the JWT secret (it acts as fresh users)")
            seeded = seed_corpus(client, tokens)
            namespaces += seeded.namespaces
            grounded_queries += seeded.queries
            probe_user = seeded.probe_user
        try:
            for ns in namespaces:
                ns.file_ids = ns.file_ids[: args.max_files]
            probes = build_probes(
                namespaces, grounded_queries, tokens, probe_user, v2=args.v2, min_probes=args.min_probes
            )
            results = run_probes(client, probes, concurrency=args.concurrency)
        finally:
            if seeded is not None and not args.keep_seed:
                report["seed_left_behind"] = delete_seed(client, tokens, seeded)
    report["namespaces"] = [{"id": ns.id, "kind": ns.kind, "files": len(ns.file_ids)} for ns in namespaces]
    report["probes"] = summarise(results)
    report["ok"] = report["probes"]["failed"] == 0 and (report.get("catalogue") or {"ok": True})["ok"]
    return report


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run the command; returns the exit code."""
    args = parse_args(argv)
    env = os.environ if environ is None else environ
    try:
        report = validate(args, env, transport)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionError as exc:
        print(f"error: cannot reach {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print_summary(report, lambda line: print(line, flush=True))
    if args.json_path:
        args.json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return EXIT_OK if report["ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
