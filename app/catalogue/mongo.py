"""Read the few LibreChat catalogue documents the access rule and the audit need (pymongo, read-only).

Every query is a plain `find` with a projection; matches on ObjectId fields other than `_id` use
`$in`, a shape every MongoDB wire-protocol server we test against answers the same way (a bare
equality on an ObjectId field is not supported by all of them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from bson import ObjectId
from bson.errors import InvalidId
from pymongo import MongoClient
from pymongo.database import Database

from app.catalogue.documents import (
    AGENT_RESOURCE,
    PRINCIPAL_GROUP,
    PRINCIPAL_PUBLIC,
    PRINCIPAL_ROLE,
    PRINCIPAL_USER,
    Document,
    Principal,
)

DEFAULT_DATABASE = "LibreChat"
_BATCH = 1000  # ids per `$in`, so one query never carries an unbounded list

_AGENT_FIELDS = {"_id": 1, "id": 1, "name": 1, "author": 1, "tool_resources": 1, "tenantId": 1}
_FILE_FIELDS = {
    "_id": 0,
    "file_id": 1,
    "user": 1,
    "filename": 1,
    "embedded": 1,
    "bytes": 1,
    "type": 1,
    "source": 1,
    "context": 1,
    "tenantId": 1,
}
_ACL_FIELDS = {
    "_id": 0,
    "principalType": 1,
    "principalId": 1,
    "resourceType": 1,
    "resourceId": 1,
    "permBits": 1,
    "expiredAt": 1,
}


def connect(uri: str, *, timeout_ms: int = 5000, **options: Any) -> MongoClient[dict[str, Any]]:
    """A client for LibreChat's MongoDB that fails fast when the server is unreachable.

    The constructor does not block: pymongo connects in the background and the first operation
    waits at most `timeout_ms` for a server. `options` go to `MongoClient` (e.g. `timeoutMS`).
    """
    return MongoClient(
        uri,
        serverSelectionTimeoutMS=timeout_ms,
        connectTimeoutMS=timeout_ms,
        socketTimeoutMS=timeout_ms * 4,
        **options,
    )


def catalogue_database(
    client: MongoClient[dict[str, Any]], name: str | None = None
) -> Database[dict[str, Any]]:
    """Database `name`, else the one named in the URI, else LibreChat's default name."""
    if name:
        return client[name]
    return client.get_default_database(default=DEFAULT_DATABASE)


def object_id(value: str) -> ObjectId | None:
    """An ObjectId from its hex form, or None when it is not one."""
    try:
        return ObjectId(value)
    except (InvalidId, TypeError):
        return None


def _batches(values: Sequence[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), _BATCH):
        yield list(values[start : start + _BATCH])


def read_agents(db: Database[dict[str, Any]], agent_ids: Iterable[str] | None = None) -> list[Document]:
    """Agents (all of them, or those whose `id` is listed) with their tool resources."""
    if agent_ids is None:
        return list(db["agents"].find({}, _AGENT_FIELDS))
    ids = sorted(set(agent_ids))
    found: list[Document] = []
    for batch in _batches(ids):
        found.extend(db["agents"].find({"id": {"$in": batch}}, _AGENT_FIELDS))
    return found


def read_files(db: Database[dict[str, Any]], file_ids: Iterable[str]) -> list[Document]:
    """File records for these file ids (unknown ids are simply absent)."""
    ids = sorted(set(file_ids))
    found: list[Document] = []
    for batch in _batches(ids):
        found.extend(db["files"].find({"file_id": {"$in": batch}}, _FILE_FIELDS))
    return found


def read_agent_acl(db: Database[dict[str, Any]], agent_db_ids: Iterable[Any]) -> list[Document]:
    """ACL entries on these Agents (by their `_id`)."""
    ids = [i for i in {str(v) for v in agent_db_ids} if object_id(i) is not None]
    found: list[Document] = []
    for batch in _batches(sorted(ids)):
        query = {"resourceType": AGENT_RESOURCE, "resourceId": {"$in": [object_id(i) for i in batch]}}
        found.extend(db["aclentries"].find(query, _ACL_FIELDS))
    return found


def read_public_agent_acl(db: Database[dict[str, Any]]) -> list[Document]:
    """Every ACL entry that shares an Agent with `public`."""
    query = {"resourceType": AGENT_RESOURCE, "principalType": PRINCIPAL_PUBLIC}
    return list(db["aclentries"].find(query, _ACL_FIELDS))


def read_user(db: Database[dict[str, Any]], user_id: str) -> Document | None:
    """The user document (`_id`, `role`, `idOnTheSource`), or None."""
    oid = object_id(user_id)
    if oid is None:
        return None
    return db["users"].find_one({"_id": oid}, {"_id": 1, "role": 1, "idOnTheSource": 1})


def read_groups_of(db: Database[dict[str, Any]], member_keys: Iterable[str]) -> list[Document]:
    """Groups whose `memberIds` holds any of these keys (user id, `idOnTheSource`)."""
    keys = sorted({k for k in member_keys if k})
    if not keys:
        return []
    return list(db["groups"].find({"memberIds": {"$in": keys}}, {"_id": 1, "memberIds": 1}))


def _principal_ids(principals: Iterable[Principal]) -> list[Any]:
    """`principalId`s to look for: user and group ObjectIds (and their string form), role names."""
    values: list[Any] = []
    for principal in principals:
        if principal.id is None:
            continue
        if principal.type in (PRINCIPAL_USER, PRINCIPAL_GROUP):
            oid = object_id(principal.id)
            if oid is not None:
                values.append(oid)
            values.append(principal.id)
        elif principal.type == PRINCIPAL_ROLE:
            values.append(principal.id)
    return values


def read_principal_agent_acl(db: Database[dict[str, Any]], principals: Iterable[Principal]) -> list[Document]:
    """ACL entries on Agents that name any of these principals (`public` included)."""
    ids = _principal_ids(principals)
    found: list[Document] = []
    for batch in _batches(ids):
        query = {"resourceType": AGENT_RESOURCE, "principalId": {"$in": batch}}
        found.extend(db["aclentries"].find(query, _ACL_FIELDS))
    found.extend(read_public_agent_acl(db))
    return found


def read_agents_by_db_id(db: Database[dict[str, Any]], db_ids: Iterable[Any]) -> list[Document]:
    """Agents by their `_id`."""
    ids = sorted({str(v) for v in db_ids if object_id(str(v)) is not None})
    found: list[Document] = []
    for batch in _batches(ids):
        found.extend(db["agents"].find({"_id": {"$in": [object_id(i) for i in batch]}}, _AGENT_FIELDS))
    return found


def read_authored_agents(db: Database[dict[str, Any]], user_id: str) -> list[Document]:
    """Agents whose `author` is this user."""
    oid = object_id(user_id)
    authors: list[Any] = [user_id] if oid is None else [oid, user_id]
    return list(db["agents"].find({"author": {"$in": authors}}, _AGENT_FIELDS))
