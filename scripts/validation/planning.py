"""Which probes to send (pure): isolation across every namespace and read route, tokens, limits,
grounded questions and /query_v2's safe refusal."""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from scripts.validation.checks import (
    Check,
    Probe,
    grounded,
    nothing_foreign,
    reaches,
    refused,
    v2_safe_refusal,
)
from scripts.validation.inventory import AGENT, USER, GroundedQuery, Namespace, Tokens

MAX_FILE_IDS = 1000
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


def owner_scope(reader: Namespace, probe_user: str) -> tuple[str, str | None]:
    """The token user and entity_id a reader of this namespace uses."""
    if reader.kind == AGENT:
        return probe_user, reader.id
    return reader.id, None


@dataclass(frozen=True)
class _Reader:
    """One namespace reading through the service: its token, its scope and what may come back."""

    who: str
    file_ids: list[str]
    header: dict[str, str]
    scope: dict[str, str]  # {"entity_id": ...} for an Agent, in a body or the query string
    guard: Check  # nothing foreign may come back


def plan_isolation_probes(
    namespaces: Sequence[Namespace], tokens: Tokens, probe_user: str, queries: Sequence[str]
) -> list[Probe]:
    """Every namespace against every other namespace's files, through every read route."""
    probes: list[Probe] = []
    readable = [ns for ns in namespaces if ns.file_ids and tokens.has(owner_scope(ns, probe_user)[0])]
    for namespace in readable:
        user, entity = owner_scope(namespace, probe_user)
        own = set(namespace.file_ids)
        owners = {user} | ({entity} if entity else set())
        reader = _Reader(
            f"{namespace.kind} {namespace.id}",
            namespace.file_ids,
            tokens.header(user),
            {"entity_id": entity} if entity else {},
            nothing_foreign(own, owners),
        )
        others = [ns for ns in namespaces if ns.id != namespace.id and ns.file_ids]
        foreign = [f for ns in others for f in ns.file_ids if f not in own]
        probes += _own_probes(reader, own, queries[0])
        for fid in foreign:
            probes += _foreign_file_probes(reader, fid)
        for query in queries:
            probes += _foreign_query_probes(reader, foreign, query)
    # a user naming another user's id as entity_id must not reach that user's files
    users = [ns for ns in readable if ns.kind == USER]
    for a in users:
        for b in users:
            if a.id != b.id:
                probes += _user_as_entity_probes(a, b, tokens, queries[0])
    return probes


def _own_probes(reader: _Reader, own: set[str], query: str) -> list[Probe]:
    """The namespace reads its own files (a positive control), and /ids lists nothing foreign."""
    return [
        Probe(
            "reach",
            f"{reader.who} reads its own files",
            "POST",
            "/query_multiple",
            reaches(own),
            {"query": query, "file_ids": reader.file_ids, "k": 10, **reader.scope},
            headers=reader.header,
        ),
        Probe(
            "ids_listing",
            f"{reader.who}: /ids lists nothing foreign",
            "GET",
            "/ids",
            reader.guard,
            params=reader.scope,
            headers=reader.header,
        ),
    ]


def _foreign_file_probes(reader: _Reader, fid: str) -> list[Probe]:
    """A foreign file's documents and context, asked for by id."""
    return [
        Probe(
            "foreign_documents",
            f"{reader.who}: GET /documents {fid}",
            "GET",
            "/documents",
            reader.guard,
            params={"ids": fid, **reader.scope},
            headers=reader.header,
        ),
        Probe(
            "foreign_context",
            f"{reader.who}: context of {fid}",
            "GET",
            f"/documents/{fid}/context",
            refused(400, 403, 404),
            params=reader.scope,
            headers=reader.header,
        ),
    ]


def _foreign_query_probes(reader: _Reader, foreign: list[str], query: str) -> list[Probe]:
    """One question about each foreign file, about all of them at once, and mixed with the own files."""
    probes = [
        Probe(
            "foreign_query",
            f"{reader.who}: /query {fid} {query!r}",
            "POST",
            "/query",
            reader.guard,
            {"query": query, "file_id": fid, "k": 5, **reader.scope},
            headers=reader.header,
        )
        for fid in foreign
    ]
    if not foreign:
        return probes
    mixed = (reader.file_ids + foreign)[:MAX_FILE_IDS]
    return [
        *probes,
        Probe(
            "foreign_batch",
            f"{reader.who}: /query_multiple foreign only {query!r}",
            "POST",
            "/query_multiple",
            reader.guard,
            {"query": query, "file_ids": foreign[:MAX_FILE_IDS], "k": 10, **reader.scope},
            headers=reader.header,
        ),
        Probe(
            "mixed_batch",
            f"{reader.who}: /query_multiple mixed {query!r}",
            "POST",
            "/query_multiple",
            reader.guard,
            {"query": query, "file_ids": mixed, "k": 20, **reader.scope},
            headers=reader.header,
        ),
    ]


def _user_as_entity_probes(a: Namespace, b: Namespace, tokens: Tokens, query: str) -> list[Probe]:
    """User `a` naming user `b`'s id as entity_id, on every read route: nothing of `b`'s comes back."""
    header = tokens.header(a.id)
    guard = nothing_foreign(set(a.file_ids), {a.id})
    who = f"user {a.id} as entity_id {b.id}"
    probes: list[Probe] = []
    for fid in b.file_ids:
        probes.append(
            Probe(
                "user_as_entity",
                f"{who}: /query {fid}",
                "POST",
                "/query",
                guard,
                {"query": query, "file_id": fid, "entity_id": b.id},
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
            {"query": query, "file_ids": b.file_ids, "entity_id": b.id, "k": 10},
            headers=header,
        )
    )
    probes.append(
        Probe(
            "user_as_entity", f"{who}: /ids", "GET", "/ids", guard, params={"entity_id": b.id}, headers=header
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


def build_probes(
    namespaces: Sequence[Namespace],
    grounded_queries: Sequence[GroundedQuery],
    tokens: Tokens,
    probe_user: str,
    *,
    v2: bool,
    min_probes: int,
) -> list[Probe]:
    """All probes, with as many isolation questions as it takes to reach `min_probes` (--min-probes)."""
    fixed: list[Probe] = []
    any_file = next((f for ns in namespaces for f in ns.file_ids), "probe-no-such-file")
    fixed += plan_token_probes(tokens, probe_user, any_file)
    fixed += plan_limit_probes(tokens, probe_user)
    fixed += plan_grounded_probes(grounded_queries, tokens, probe_user)
    if v2:
        fixed += plan_v2_probes(namespaces, tokens, probe_user)
    one = plan_isolation_probes(namespaces, tokens, probe_user, PROBE_QUERIES[:1])
    two = plan_isolation_probes(namespaces, tokens, probe_user, PROBE_QUERIES[:2])
    per_query = len(two) - len(one)
    base = len(one) - per_query
    questions = queries_for(min_probes, len(fixed) + base, per_query)
    return fixed + plan_isolation_probes(namespaces, tokens, probe_user, questions)
