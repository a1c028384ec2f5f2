"""A small generated corpus uploaded through /embed (two Agents, two users), and its deletion."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import httpx

from scripts.validation.checks import read_json
from scripts.validation.inventory import (
    AGENT,
    USER,
    GroundedQuery,
    Namespace,
    Tokens,
    UsageError,
    random_user_id,
)

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
            if r.status_code != 200 or read_json(r) is None or not read_json(r).get("status"):
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
