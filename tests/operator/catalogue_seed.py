"""LibreChat-shaped catalogue documents (CONTRACT.md section 7), written with pymongo."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId
from pymongo import MongoClient
from pymongo.database import Database

VIEWER_BITS = 1
OWNER_BITS = 15


@contextlib.contextmanager
def database(mongo_uri: str, name: str) -> Iterator[Database[dict[str, Any]]]:
    """A database of its own on the shared test server; the client is closed afterwards."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri_for(mongo_uri, name), serverSelectionTimeoutMS=5000)
    try:
        yield client.get_default_database()
    finally:
        client.close()


def uri_for(mongo_uri: str, name: str) -> str:
    """The server URI naming database `name`."""
    return f"{mongo_uri.rsplit('/', 1)[0]}/{name}"


@dataclass
class Catalogue:
    """Builds users, groups, Agents, ACL entries and files the way LibreChat stores them."""

    db: Database[dict[str, Any]]
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def user(self, role: str = "USER", **extra: Any) -> ObjectId:
        """Insert a user; return its `_id`."""
        oid = ObjectId()
        self.db["users"].insert_one({"_id": oid, "role": role, "email": f"{oid}@example.test", **extra})
        return oid

    def group(self, name: str, members: list[str]) -> ObjectId:
        """Insert a local group whose `memberIds` are user id strings."""
        oid = ObjectId()
        self.db["groups"].insert_one({"_id": oid, "name": name, "source": "local", "memberIds": members})
        return oid

    def file(self, owner: ObjectId | None, *, embedded: bool = True, name: str = "doc.txt") -> str:
        """Insert a file record; return its uuid `file_id`."""
        file_id = str(uuid.uuid4())
        doc: dict[str, Any] = {
            "file_id": file_id,
            "filename": name,
            "embedded": embedded,
            "bytes": 100,
            "type": "text/plain",
            "source": "local",
            "context": "agents",
        }
        if owner is not None:
            doc["user"] = owner
        self.db["files"].insert_one(doc)
        return file_id

    def agent(self, author: ObjectId, file_search: list[str], **resources: list[str]) -> str:
        """Insert an Agent with a knowledge base; its author gets the owner ACL entry as LibreChat does."""
        agent_id = f"agent_{uuid.uuid4().hex[:21]}"
        oid = ObjectId()
        tool_resources: dict[str, Any] = {"file_search": {"file_ids": file_search}}
        tool_resources.update({k: {"file_ids": v} for k, v in resources.items()})
        doc = {
            "_id": oid,
            "id": agent_id,
            "name": agent_id,
            "author": author,
            "provider": "openAI",
            "model": "gpt-4o-mini",
            "tools": ["file_search"],
            "tool_resources": tool_resources,
        }
        self.db["agents"].insert_one(doc)
        self.agents[agent_id] = doc
        self.share(agent_id, "user", author, OWNER_BITS)
        return agent_id

    def share(
        self, agent_id: str, principal_type: str, principal: Any, bits: int = VIEWER_BITS, **extra: Any
    ) -> None:
        """Insert an ACL entry on the Agent (`resourceId` is its `_id`)."""
        entry: dict[str, Any] = {
            "principalType": principal_type,
            "resourceType": "agent",
            "resourceId": self.agents[agent_id]["_id"],
            "permBits": bits,
            **extra,
        }
        if principal_type != "public":
            entry["principalId"] = principal
        self.db["aclentries"].insert_one(entry)
