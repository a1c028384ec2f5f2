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
import base64
import json
import os
import secrets
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    import yaml
except ImportError:  # pragma: no cover - depends on how the script was started
    _use_project_venv()
    raise  # .venv exists and was used, yet lacks them: the import error is the honest answer

import jwt  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
MAX_FILE_IDS = 1000
AGENT, USER = "agent", "user"
# questions unrelated to any probe document: the isolation probes ask these of foreign files
PROBE_QUERIES = (
    "What does the document say?",
    "Summarise the main points.",
    "Which numbers are mentioned?",
    "Who is responsible for the ledger?",
    "What happened in the harbour?",
    "List every city named here.",
    "What colour was mentioned first?",
    "How many crates were carried?",
    "What is the policy on travel?",
    "Which animal appears in the text?",
    "When was this written?",
    "What are the key risks?",
)
UNANSWERABLE = (
    "What was the exact wingspan, in millimetres, of the courier pigeon that flew to the moon in 1821?"
)


class UsageError(Exception):
    """Arguments or input files cannot be used (exit 2)."""


# --------------------------------------------------------------------------- inventory and tokens


@dataclass
class Namespace:
    """Who owns a set of files in the service: an Agent (`agent_…`) or a user id."""

    id: str
    kind: str
    file_ids: list[str] = field(default_factory=list)


@dataclass
class GroundedQuery:
    """A question whose answer must come from `expect_file` and contain `expect_text`."""

    query: str
    file_ids: list[str]
    expect_file: str
    expect_text: str
    entity_id: str | None = None
    user_id: str | None = None
    k: int = 3


class Tokens:
    """Bearer tokens per user id: minted with the shared secret, or given ready-made."""

    def __init__(self, secret: str | None, ready: Mapping[str, str] | None = None) -> None:
        self.secret = secret
        self.ready = dict(ready or {})
        if not secret and not self.ready:
            raise UsageError("give the JWT secret (--jwt-secret-env) or ready tokens (--tokens)")

    def can_mint(self) -> bool:
        """True when any user id can get a token."""
        return bool(self.secret)

    def has(self, user_id: str) -> bool:
        """True when a token for this user is available."""
        return self.can_mint() or user_id in self.ready

    def token(self, user_id: str, *, ttl_s: int = 300) -> str:
        """A LibreChat-like token `{id, iat, exp}` for this user."""
        if self.secret:
            now = int(time.time())
            return jwt.encode({"id": user_id, "iat": now, "exp": now + ttl_s}, self.secret, algorithm="HS256")
        if user_id not in self.ready:
            raise UsageError(f"no token for user {user_id}; add one to --tokens or give the JWT secret")
        return self.ready[user_id]

    def header(self, user_id: str) -> dict[str, str]:
        """The Authorization header for this user."""
        return {"Authorization": f"Bearer {self.token(user_id)}"}

    def any_user(self) -> str:
        """A user id to probe with when the namespace does not matter."""
        if self.ready:
            return next(iter(self.ready))
        return random_user_id()


def random_user_id() -> str:
    """A fresh id shaped like a LibreChat user id (24 hex digits, an ObjectId)."""
    return secrets.token_hex(12)


def load_inventory(path: Path) -> list[Namespace]:
    """Namespaces from a JSON file: {"namespaces": [{"id", "kind": "agent"|"user", "file_ids"}]}."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inventory {path}: {exc}") from None
    entries = raw.get("namespaces") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list):
        raise UsageError(f"{path}: expected {{'namespaces': [...]}}")
    found: list[Namespace] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("kind") not in (AGENT, USER) or not entry.get("id"):
            raise UsageError(f"{path}: each namespace needs `id` and `kind` ('agent' or 'user')")
        found.append(
            Namespace(str(entry["id"]), str(entry["kind"]), [str(f) for f in entry.get("file_ids") or []])
        )
    return found


def load_state(path: Path) -> list[Namespace]:
    """Agent namespaces from scripts/provision_knowledge_bases.py's state file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read state file {path}: {exc}") from None
    found: list[Namespace] = []
    for kb in (raw.get("knowledge_bases") or {}).values():
        if kb.get("agent_id"):
            ids = [str(f["file_id"]) for f in (kb.get("files") or {}).values() if f.get("file_id")]
            found.append(Namespace(str(kb["agent_id"]), AGENT, ids))
    return found


def load_queries(path: Path) -> list[GroundedQuery]:
    """Grounded queries from a JSON list or JSON lines."""
    text = path.read_text(encoding="utf-8")
    try:
        items = (
            json.loads(text)
            if text.lstrip().startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
    except ValueError as exc:
        raise UsageError(f"cannot read queries {path}: {exc}") from None
    queries: list[GroundedQuery] = []
    for i, item in enumerate(items):
        try:
            queries.append(
                GroundedQuery(
                    query=str(item["query"]),
                    file_ids=[str(f) for f in item["file_ids"]],
                    expect_file=str(item["expect_file"]),
                    expect_text=str(item["expect_text"]),
                    entity_id=item.get("entity_id") or None,
                    user_id=item.get("user_id") or None,
                    k=int(item.get("k", 3)),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"{path}: query {i} needs query, file_ids, expect_file, expect_text "
                "(entity_id, k, user_id optional)"
            ) from None
    return queries


# --------------------------------------------------------------------------- probes and their checks


Check = Callable[[httpx.Response], str | None]


@dataclass
class Probe:
    """One request and the rule its answer must follow."""

    kind: str
    description: str
    method: str
    path: str
    check: Check
    json_body: Any = None
    params: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ProbeResult:
    """A probe's outcome: `error` is None when it passed."""

    kind: str
    description: str
    error: str | None
    status: int | None = None


def _result_file_ids(body: Any) -> tuple[list[str], list[str]]:
    """File ids and owners of every result in a /query, /query_multiple, /documents or /ids answer."""
    files: list[str] = []
    owners: list[str] = []
    if not isinstance(body, list):
        return files, owners
    for item in body:
        doc = item[0] if isinstance(item, list) and item else item
        if isinstance(doc, str):  # /ids lists bare file ids
            files.append(doc)
            continue
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        if isinstance(meta, Mapping):
            files.append(str(meta.get("file_id")))
            if meta.get("user_id") is not None:
                owners.append(str(meta.get("user_id")))
    return files, owners


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def nothing_foreign(allowed_files: set[str], allowed_owners: set[str], *, refusal_ok: bool = True) -> Check:
    """Pass on a refusal (400/403/404/422) or an answer holding only allowed files and owners.

    401 fails: a probe whose token was refused proves nothing about isolation.
    """

    def check(response: httpx.Response) -> str | None:
        status = response.status_code
        if status in (400, 403, 404, 422):
            return None if refusal_ok else f"refused with {status}"
        if status != 200:
            return f"unexpected HTTP {status}"
        files, owners = _result_file_ids(_json(response))
        foreign = sorted({f for f in files if f not in allowed_files})
        strangers = sorted({o for o in owners if o not in allowed_owners})
        if foreign:
            return f"returned foreign file(s) {', '.join(foreign[:5])}"
        if strangers:
            return f"returned chunks owned by {', '.join(strangers[:5])}"
        return None

    return check


def refused(*statuses: int) -> Check:
    """Pass only on one of these statuses."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code in statuses:
            return None
        return f"HTTP {response.status_code}, expected {' or '.join(map(str, statuses))}"

    return check


def reaches(own_files: set[str]) -> Check:
    """A positive control: 200 with at least one result, all from the namespace's own files."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            return f"HTTP {response.status_code}; the namespace cannot read its own files"
        files, _ = _result_file_ids(_json(response))
        if not files:
            return "no results from the namespace's own files"
        foreign = sorted(set(files) - own_files)
        return f"returned foreign file(s) {', '.join(foreign[:5])}" if foreign else None

    return check


def grounded(expect_file: str, expect_text: str) -> Check:
    """The expected file is among the results and one of its chunks contains the expected text."""
    wanted = expect_text.casefold()

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            return f"HTTP {response.status_code}"
        body = _json(response) or []
        docs = [item[0] for item in body if isinstance(item, list) and item and isinstance(item[0], Mapping)]
        from_file = [d for d in docs if (d.get("metadata") or {}).get("file_id") == expect_file]
        if not from_file:
            got = sorted({str((d.get("metadata") or {}).get("file_id")) for d in docs})
            return f"{expect_file} not among the results ({', '.join(got) or 'none'})"
        if not any(wanted in str(d.get("page_content", "")).casefold() for d in from_file):
            return f"no chunk of {expect_file} contains {expect_text!r}"
        return None

    return check


def v2_safe_refusal(allowed_files: set[str]) -> Check:
    """/query_v2 answered 200 with no results, nothing foreign, and the safe refusal sentence."""

    def check(response: httpx.Response) -> str | None:
        if response.status_code != 200:
            detail = (_json(response) or {}).get("detail") if isinstance(_json(response), Mapping) else None
            return f"HTTP {response.status_code}" + (f": {detail}" if detail else "")
        body = _json(response)
        if not isinstance(body, Mapping) or body.get("route") != "v2":
            return "not a V2 answer (no route: 'v2')"
        results = body.get("results")
        if not isinstance(results, list):
            return "`results` is not a list"
        foreign = sorted({str(r.get("file_id")) for r in results if isinstance(r, Mapping)} - allowed_files)
        if foreign:
            return f"returned foreign file(s) {', '.join(foreign[:5])}"
        if results:
            return f"{len(results)} result(s) for a question nothing answers; expected the safe refusal"
        refusal = body.get("safe_refusal")
        if not isinstance(refusal, str) or not refusal.strip():
            return "no `safe_refusal` sentence with empty results"
        return None

    return check


# --------------------------------------------------------------------------- probe planning (pure)


def owner_scope(reader: Namespace, probe_user: str) -> tuple[str, str | None]:
    """The token user and entity_id a reader of this namespace uses."""
    if reader.kind == AGENT:
        return probe_user, reader.id
    return reader.id, None


def plan_isolation_probes(
    namespaces: Sequence[Namespace], tokens: Tokens, probe_user: str, queries: Sequence[str]
) -> list[Probe]:
    """Every namespace against every other namespace's files, through every read route."""
    probes: list[Probe] = []
    readable = [ns for ns in namespaces if ns.file_ids and tokens.has(owner_scope(ns, probe_user)[0])]
    for reader in readable:
        user, entity = owner_scope(reader, probe_user)
        own = set(reader.file_ids)
        owners = {user} | ({entity} if entity else set())
        header = tokens.header(user)
        extra = {"entity_id": entity} if entity else {}
        params = {"entity_id": entity} if entity else {}
        others = [ns for ns in namespaces if ns.id != reader.id and ns.file_ids]
        foreign = [f for ns in others for f in ns.file_ids if f not in own]
        guard = nothing_foreign(own, owners)
        who = f"{reader.kind} {reader.id}"
        probes.append(
            Probe(
                "reach",
                f"{who} reads its own files",
                "POST",
                "/query_multiple",
                reaches(own),
                {"query": queries[0], "file_ids": reader.file_ids, "k": 10, **extra},
                headers=header,
            )
        )
        probes.append(
            Probe(
                "ids_listing",
                f"{who}: /ids lists nothing foreign",
                "GET",
                "/ids",
                guard,
                params=params,
                headers=header,
            )
        )
        for fid in foreign:
            probes.append(
                Probe(
                    "foreign_documents",
                    f"{who}: GET /documents {fid}",
                    "GET",
                    "/documents",
                    guard,
                    params={"ids": fid, **params},
                    headers=header,
                )
            )
            probes.append(
                Probe(
                    "foreign_context",
                    f"{who}: context of {fid}",
                    "GET",
                    f"/documents/{fid}/context",
                    refused(400, 403, 404),
                    params=params,
                    headers=header,
                )
            )
        for query in queries:
            for fid in foreign:
                probes.append(
                    Probe(
                        "foreign_query",
                        f"{who}: /query {fid} {query!r}",
                        "POST",
                        "/query",
                        guard,
                        {"query": query, "file_id": fid, "k": 5, **extra},
                        headers=header,
                    )
                )
            if foreign:
                probes.append(
                    Probe(
                        "foreign_batch",
                        f"{who}: /query_multiple foreign only {query!r}",
                        "POST",
                        "/query_multiple",
                        guard,
                        {"query": query, "file_ids": foreign[:MAX_FILE_IDS], "k": 10, **extra},
                        headers=header,
                    )
                )
                mixed = (reader.file_ids + foreign)[:MAX_FILE_IDS]
                probes.append(
                    Probe(
                        "mixed_batch",
                        f"{who}: /query_multiple mixed {query!r}",
                        "POST",
                        "/query_multiple",
                        guard,
                        {"query": query, "file_ids": mixed, "k": 20, **extra},
                        headers=header,
                    )
                )
    # a user naming another user's id as entity_id must not reach that user's files
    users = [ns for ns in readable if ns.kind == USER]
    for a in users:
        for b in users:
            if a.id == b.id:
                continue
            header = tokens.header(a.id)
            guard = nothing_foreign(set(a.file_ids), {a.id})
            who = f"user {a.id} as entity_id {b.id}"
            for fid in b.file_ids:
                probes.append(
                    Probe(
                        "user_as_entity",
                        f"{who}: /query {fid}",
                        "POST",
                        "/query",
                        guard,
                        {"query": queries[0], "file_id": fid, "entity_id": b.id},
                        headers=header,
                    )
                )
                probes.append(
                    Probe(
                        "user_as_entity",
                        f"{who}: /documents {fid}",
                        "GET",
                        "/documents",
                        guard,
                        params={"ids": fid, "entity_id": b.id},
                        headers=header,
                    )
                )
            probes.append(
                Probe(
                    "user_as_entity",
                    f"{who}: /query_multiple",
                    "POST",
                    "/query_multiple",
                    guard,
                    {"query": queries[0], "file_ids": b.file_ids, "entity_id": b.id, "k": 10},
                    headers=header,
                )
            )
            probes.append(
                Probe(
                    "user_as_entity",
                    f"{who}: /ids",
                    "GET",
                    "/ids",
                    guard,
                    params={"entity_id": b.id},
                    headers=header,
                )
            )
    return probes


def plan_token_probes(tokens: Tokens, probe_user: str, file_id: str) -> list[Probe]:
    """Forged, expired, exp-less, alg:none, garbage and missing tokens all answer 401."""
    now = int(time.time())
    bad: dict[str, str] = {
        "forged (wrong secret)": jwt.encode(
            {"id": probe_user, "exp": now + 300}, secrets.token_hex(32), "HS256"
        ),
        "alg none": _unsigned({"id": probe_user, "exp": now + 300}),
        "garbage": "not.a.token",
    }
    if tokens.secret:  # these two only mean something when signed with the real secret
        bad["expired"] = jwt.encode(
            {"id": probe_user, "iat": now - 900, "exp": now - 600}, tokens.secret, "HS256"
        )
        bad["no exp"] = jwt.encode({"id": probe_user, "iat": now}, tokens.secret, "HS256")
    probes: list[Probe] = []
    body = {"query": PROBE_QUERIES[0], "file_ids": [file_id], "k": 3}
    for name, token in bad.items():
        header = {"Authorization": f"Bearer {token}"}
        probes.append(
            Probe(
                "bad_token",
                f"{name} token on /query_multiple",
                "POST",
                "/query_multiple",
                refused(401),
                body,
                headers=header,
            )
        )
        probes.append(
            Probe("bad_token", f"{name} token on /ids", "GET", "/ids", refused(401), headers=header)
        )
    probes.append(
        Probe("bad_token", "no Authorization header", "POST", "/query_multiple", refused(401), body)
    )
    return probes


def _unsigned(claims: Mapping[str, Any]) -> str:
    """A token with `alg: none` and no signature, as an attacker would send it."""

    def part(data: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def plan_limit_probes(tokens: Tokens, probe_user: str) -> list[Probe]:
    """1,001 distinct file ids and an empty list are 400 on /query_multiple."""
    header = tokens.header(probe_user)
    too_many = [f"probe-limit-{i}" for i in range(MAX_FILE_IDS + 1)]
    return [
        Probe(
            "limits",
            "1,001 file ids",
            "POST",
            "/query_multiple",
            refused(400),
            {"query": "x", "file_ids": too_many},
            headers=header,
        ),
        Probe(
            "limits",
            "empty file_ids",
            "POST",
            "/query_multiple",
            refused(400),
            {"query": "x", "file_ids": []},
            headers=header,
        ),
    ]


def plan_grounded_probes(queries: Sequence[GroundedQuery], tokens: Tokens, probe_user: str) -> list[Probe]:
    """One /query_multiple per grounded query."""
    probes: list[Probe] = []
    for q in queries:
        user = q.user_id or probe_user
        body: dict[str, Any] = {"query": q.query, "file_ids": q.file_ids, "k": q.k}
        if q.entity_id:
            body["entity_id"] = q.entity_id
        probes.append(
            Probe(
                "grounded",
                f"{q.query!r} -> {q.expect_file}",
                "POST",
                "/query_multiple",
                grounded(q.expect_file, q.expect_text),
                body,
                headers=tokens.header(user),
            )
        )
    return probes


def plan_v2_probes(namespaces: Sequence[Namespace], tokens: Tokens, probe_user: str) -> list[Probe]:
    """Per Agent: an unanswerable question over its own files, and a foreign file id, both refused safely."""
    probes: list[Probe] = []
    agents = [ns for ns in namespaces if ns.kind == AGENT and ns.file_ids]
    for agent in agents:
        header = tokens.header(probe_user)
        own = set(agent.file_ids)
        nonce = uuid.uuid4().hex[:8]
        probes.append(
            Probe(
                "v2_unanswerable",
                f"agent {agent.id}: unanswerable question",
                "POST",
                "/query_v2",
                v2_safe_refusal(own),
                {
                    "query": f"{UNANSWERABLE} ({nonce})",
                    "file_ids": agent.file_ids[:MAX_FILE_IDS],
                    "entity_id": agent.id,
                    "k": 8,
                },
                headers=header,
            )
        )
        foreign = [f for ns in namespaces if ns.id != agent.id for f in ns.file_ids if f not in own]
        if foreign:
            probes.append(
                Probe(
                    "v2_foreign",
                    f"agent {agent.id}: foreign file {foreign[0]}",
                    "POST",
                    "/query_v2",
                    v2_safe_refusal(own),
                    {"query": PROBE_QUERIES[0], "file_ids": foreign[:1], "entity_id": agent.id, "k": 8},
                    headers=header,
                )
            )
    return probes


def queries_for(target: int, fixed: int, per_query: int) -> list[str]:
    """Enough probe questions that the planned probes reach `target` (at least one)."""
    if per_query <= 0:
        return list(PROBE_QUERIES[:1])
    needed = max(1, -(-(target - fixed) // per_query))
    return [
        PROBE_QUERIES[i % len(PROBE_QUERIES)] + ("" if i < len(PROBE_QUERIES) else f" ({i})")
        for i in range(needed)
    ]


def run_probes(client: httpx.Client, probes: Sequence[Probe], *, concurrency: int) -> list[ProbeResult]:
    """Send every probe (a few at a time) and apply its check."""

    def one(probe: Probe) -> ProbeResult:
        try:
            response = client.request(
                probe.method, probe.path, json=probe.json_body, params=probe.params, headers=probe.headers
            )
        except httpx.HTTPError as exc:
            return ProbeResult(probe.kind, probe.description, f"request failed: {type(exc).__name__}")
        try:
            error = probe.check(response)
        except Exception as exc:  # a malformed answer is a failed probe, not a crash
            error = f"unreadable answer: {type(exc).__name__}"
        return ProbeResult(probe.kind, probe.description, error, response.status_code)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, probes))


# --------------------------------------------------------------------------- seeding

SEED_WORDS = (
    ("amber", "heron", "Lisbon"),
    ("cobalt", "otter", "Tallinn"),
    ("crimson", "lynx", "Porto"),
    ("jade", "falcon", "Bergen"),
    ("ivory", "badger", "Ghent"),
    ("scarlet", "moose", "Turku"),
    ("violet", "walrus", "Split"),
    ("ochre", "gecko", "Lyon"),
    ("teal", "bison", "Riga"),
    ("silver", "crane", "Cork"),
    ("umber", "ibex", "Graz"),
    ("indigo", "koala", "Basel"),
)


@dataclass
class Seeded:
    """The generated corpus: namespaces, grounded queries, who uploaded each file (for cleanup), and
    the user the Agent probes act as."""

    namespaces: list[Namespace]
    queries: list[GroundedQuery]
    uploaders: dict[str, str]
    probe_user: str


def seed_corpus(client: httpx.Client, tokens: Tokens, *, files_per_namespace: int = 3) -> Seeded:
    """Upload generated documents under two Agents and two users through /embed.

    Each Agent's files are uploaded by its own author, and the Agent probes act as a third user who
    uploaded nothing: the service lets an uploader read its own uploads, so an author of both Agents
    would rightly see both knowledge bases, which is not what an isolation probe asks.
    """
    run = uuid.uuid4().hex[:10]
    authors: dict[str, str] = {}
    namespaces = [
        Namespace(f"agent_probe_{run}_a", AGENT),
        Namespace(f"agent_probe_{run}_b", AGENT),
        Namespace(random_user_id(), USER),
        Namespace(random_user_id(), USER),
    ]
    queries: list[GroundedQuery] = []
    uploaders: dict[str, str] = {}
    words = iter(SEED_WORDS * 4)
    for ns_index, ns in enumerate(namespaces):
        user = authors.setdefault(ns.id, random_user_id()) if ns.kind == AGENT else ns.id
        for i in range(files_per_namespace):
            colour, animal, city = next(words)
            crates = 11 + 7 * (ns_index * files_per_namespace + i)
            file_id = f"probe-{run}-{ns_index}-{i}"
            text = (
                f"Ledger of the {colour} {animal}.\n\nIn the spring the {colour} {animal} carried "
                f"{crates} crates of salt to {city}. The harbour master of {city} signed for every crate.\n"
            )
            data: dict[str, str] = {"file_id": file_id}
            if ns.kind == AGENT:
                data["entity_id"] = ns.id
            r = client.post(
                "/embed",
                data=data,
                files={"file": (f"{colour}-{animal}.txt", text.encode(), "text/plain")},
                headers=tokens.header(user),
            )
            if r.status_code != 200 or _json(r) is None or not _json(r).get("status"):
                raise UsageError(f"--seed: /embed answered HTTP {r.status_code} for {file_id}")
            ns.file_ids.append(file_id)
            uploaders[file_id] = user
            queries.append(
                GroundedQuery(
                    query=f"How many crates of salt did the {colour} {animal} carry to {city}?",
                    file_ids=ns.file_ids,  # filled as we go: the final list holds all of them
                    expect_file=file_id,
                    expect_text=f"{crates} crates",
                    entity_id=ns.id if ns.kind == AGENT else None,
                    user_id=None if ns.kind == AGENT else ns.id,
                    k=1,
                )
            )
    probe_user = random_user_id()
    for q in queries:
        if q.user_id is None:
            q.user_id = probe_user
    return Seeded(namespaces, queries, uploaders, probe_user)


def delete_seed(client: httpx.Client, tokens: Tokens, seeded: Seeded) -> list[str]:
    """Delete the seeded files, each with its uploader's token; the ids that could not be deleted."""
    by_user: dict[str, list[str]] = {}
    for fid, user in seeded.uploaders.items():
        by_user.setdefault(user, []).append(fid)
    left: list[str] = []
    for user, ids in by_user.items():
        r = client.request("DELETE", "/documents", json=ids, headers=tokens.header(user))
        if r.status_code not in (200, 404):
            left.extend(ids)
    return left


# --------------------------------------------------------------------------- MongoDB catalogue


def catalogue_checks(uri: str, plan_path: Path | None) -> tuple[dict[str, Any], list[Namespace]]:
    """Audit LibreChat's catalogue; also return its knowledge bases as probe namespaces."""
    from pymongo.errors import PyMongoError

    from app.catalogue import mongo
    from app.catalogue.audit import audit_catalogue

    names: set[str] | None = None
    public_names: set[str] = set()
    if plan_path is not None:
        try:
            plan = yaml.safe_load(plan_path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read plan {plan_path}: {exc}") from None
        kbs = plan.get("knowledge_bases") or []
        names = {str(kb.get("name")) for kb in kbs if isinstance(kb, Mapping)}
        public_names = {
            str(kb.get("name")) for kb in kbs if isinstance(kb, Mapping) and kb.get("public") is True
        }
    client = mongo.connect(uri)
    try:
        db = mongo.catalogue_database(client)
        agents = mongo.read_agents(db)
        only: set[str] | None = None
        if names is not None:
            by_name = [a for a in agents if a.get("name") in names]
            only = {str(a["id"]) for a in by_name}
            missing = sorted(names - {str(a.get("name")) for a in by_name})
        else:
            missing = []
        public_allowed = {str(a["id"]) for a in agents if a.get("name") in public_names}
        considered = [a for a in agents if only is None or str(a.get("id")) in only]
        file_ids = {
            str(f)
            for a in considered
            for r in (a.get("tool_resources") or {}).values()
            if isinstance(r, Mapping)
            for f in r.get("file_ids") or []
        }
        files = mongo.read_files(db, file_ids)
        entries = mongo.read_public_agent_acl(db)
    except PyMongoError as exc:
        raise ConnectionError(f"MongoDB: {type(exc).__name__}: {exc}") from None
    finally:
        client.close()
    result = audit_catalogue(
        agents=considered, files=files, acl_entries=entries, public_allowed=public_allowed, only_agents=only
    )
    findings = [{"check": f.check, "message": f.message, "ids": list(f.ids)} for f in result.findings]
    findings.extend(
        {"check": "agent_missing", "message": f"no Agent named {n!r} in the catalogue", "ids": []}
        for n in missing
    )
    namespaces = [
        Namespace(str(a["id"]), AGENT, ids)
        for a in considered
        if (
            ids := [
                str(f)
                for f in ((a.get("tool_resources") or {}).get("file_search") or {}).get("file_ids") or []
            ]
        )
    ]
    report = {
        "knowledge_bases": result.knowledge_bases,
        "files_checked": result.files_checked,
        "findings": findings,
        "ok": not findings,
    }
    return report, namespaces


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
            probes = build_probes(namespaces, grounded_queries, tokens, probe_user, args)
            results = run_probes(client, probes, concurrency=args.concurrency)
        finally:
            if seeded is not None and not args.keep_seed:
                report["seed_left_behind"] = delete_seed(client, tokens, seeded)
    report["namespaces"] = [{"id": ns.id, "kind": ns.kind, "files": len(ns.file_ids)} for ns in namespaces]
    report["probes"] = summarise(results)
    report["ok"] = report["probes"]["failed"] == 0 and (report.get("catalogue") or {"ok": True})["ok"]
    return report


def build_probes(
    namespaces: Sequence[Namespace],
    grounded_queries: Sequence[GroundedQuery],
    tokens: Tokens,
    probe_user: str,
    args: argparse.Namespace,
) -> list[Probe]:
    """All probes, with as many isolation questions as it takes to reach --min-probes."""
    fixed: list[Probe] = []
    any_file = next((f for ns in namespaces for f in ns.file_ids), "probe-no-such-file")
    fixed += plan_token_probes(tokens, probe_user, any_file)
    fixed += plan_limit_probes(tokens, probe_user)
    fixed += plan_grounded_probes(grounded_queries, tokens, probe_user)
    if args.v2:
        fixed += plan_v2_probes(namespaces, tokens, probe_user)
    one = plan_isolation_probes(namespaces, tokens, probe_user, PROBE_QUERIES[:1])
    two = plan_isolation_probes(namespaces, tokens, probe_user, PROBE_QUERIES[:2])
    per_query = len(two) - len(one)
    base = len(one) - per_query
    questions = queries_for(args.min_probes, len(fixed) + base, per_query)
    return fixed + plan_isolation_probes(namespaces, tokens, probe_user, questions)


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
