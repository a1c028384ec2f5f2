"""app.catalogue.mongo, and the viewer app.access reads with it, against a MongoDB wire-protocol server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.database import Database

from app.access.viewer import read_viewer
from app.catalogue import mongo
from app.catalogue.audit import audit_catalogue
from tests.operator.catalogue_seed import Catalogue


def test_searchable_files_by_librechat_rule(mongo_db: Database[dict[str, Any]]) -> None:
    cat = Catalogue(mongo_db)
    admin = cat.user("ADMIN")
    alice, bob, carol, dave = cat.user(), cat.user(), cat.user("AUDITOR"), cat.user(idOnTheSource="entra-d")
    kb = [cat.file(admin, name=f"kb{i}.txt") for i in range(3)]
    orphan = cat.file(None)
    alice_own = cat.file(alice)
    agent = cat.agent(admin, [*kb, orphan])
    hr = cat.group("HR", [str(alice)])
    entra = cat.group("Entra", ["entra-d"])
    cat.share(agent, "group", hr)
    cat.share(agent, "role", "AUDITOR")
    cat.share(agent, "group", entra, expiredAt=datetime.now(UTC) - timedelta(days=1))
    other_agent = cat.agent(admin, [cat.file(admin)])

    def allowed(user, agent_id=agent, files=None):
        wanted = files if files is not None else [*kb, orphan, alice_own]
        # what the allow-list does per request: the viewer, then the requested files' documents
        requested = sorted(set(wanted))
        viewer = read_viewer(cat.db, user_id=str(user), agent_id=agent_id)
        return viewer.searchable(requested, mongo.read_files(cat.db, requested), None)

    everything_attached = {*kb, orphan}
    assert allowed(admin) == set(kb)  # the author: attached files whose owner is set
    assert allowed(alice) == everything_attached | {alice_own}  # group member + her own file
    assert allowed(carol) == everything_attached  # role AUDITOR, read from `users`
    assert allowed(bob) == set()  # no principal with VIEW
    assert allowed(dave) == set()  # his group's entry expired
    assert allowed(alice, agent_id="agent_unknown") == {alice_own}
    assert allowed(alice, agent_id=other_agent) == {alice_own}  # not shared with her
    cat.share(agent, "public", None)
    assert allowed(bob) == everything_attached


def test_readers_and_audit_on_the_server(mongo_db: Database[dict[str, Any]]) -> None:
    cat = Catalogue(mongo_db)
    admin = cat.user("ADMIN")
    a_files = [cat.file(admin) for _ in range(3)]
    b_files = [cat.file(admin), cat.file(admin, embedded=False)]
    a = cat.agent(admin, a_files)
    b = cat.agent(admin, [*b_files, a_files[0]])
    cat.share(b, "public", None)
    agents = mongo.read_agents(cat.db)
    assert {x["id"] for x in agents} == {a, b}
    assert len(mongo.read_agents(cat.db, [a])) == 1
    files = mongo.read_files(cat.db, [*a_files, *b_files, "missing"])
    assert len(files) == 5
    assert len(mongo.read_agent_acl(cat.db, [x["_id"] for x in agents])) == 3  # two owners + public
    public = mongo.read_public_agent_acl(cat.db)
    result = audit_catalogue(agents=agents, files=files, acl_entries=public)
    assert sorted(f.check for f in result.findings) == [
        "file_attached_twice",
        "kb_disjoint",
        "not_embedded",
        "public_agent",
    ]
    assert (
        audit_catalogue(agents=agents, files=files, acl_entries=public, public_allowed={b}).findings[-1].check
        == "not_embedded"
    )
