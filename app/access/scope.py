"""The one place a door gets its caller's `Scope`: `Access.read_scope` and `Access.delete_scope`.

Every HTTP route, MCP tool and delete that touches stored files goes through here, never builds a
`Scope` itself: the `entity_id` check (400), LibreChat's allow-list re-check of the requested file
ids (`ALLOWLIST_VERIFY`), then the `Scope` whose fields every SQL statement's predicate carries
(`app/store/scope.py`, `app/store/sql/10_scope.sql`). A file the allow-list drops is simply not in
the scope, so it answers exactly like a file that does not exist.

    scope = await access.read_scope(principal, body.entity_id, body.file_ids)
    found = await access.delete(principal, ids, ingest.delete)

`tests/integration/test_one_scope.py` calls every route and MCP tool that reads or deletes and
fails when one does not come through here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Sequence

from app.access.allowlist import AllowList
from app.access.namespaces import Caller, delete_namespaces
from app.access.principal import Principal
from app.config_sections import AccessSettings
from app.store.scope import Scope

Deleter = Callable[[Scope], Awaitable[set[str]]]


def as_caller(who: Principal | Caller) -> Caller:
    """A `Caller` for a bare principal (an HTTP route's: LibreChat's rules); a `Caller` as it is."""
    return who if isinstance(who, Caller) else Caller(who)


class Access:
    """The access rules of one collection: the settings that shape a scope, and the allow-list."""

    def __init__(
        self,
        collection_id: uuid.UUID,
        allowlist: AllowList,
        *,
        entity_pattern: re.Pattern[str],
        legacy_unowned: bool = False,
        delete_any_owner: bool = False,
    ) -> None:
        self.collection_id = collection_id
        self.allowlist = allowlist
        self.entity_pattern = entity_pattern
        self.legacy_unowned = legacy_unowned  # LEGACY_UNOWNED_READABLE
        self.delete_any_owner = delete_any_owner  # DELETE_SCOPE=caller

    @classmethod
    def of(cls, settings: AccessSettings, collection_id: uuid.UUID, allowlist: AllowList) -> Access:
        """The rules `settings` ask for, over the collection `collection_id`."""
        return cls(
            collection_id,
            allowlist,
            entity_pattern=settings.entity_pattern,
            legacy_unowned=settings.legacy_unowned,
            delete_any_owner=settings.delete_any_owner,
        )

    def entity(self, who: Principal | Caller, entity_id: str | None) -> str | None:
        """The `entity_id` this caller may name (None when absent or blank); 400 otherwise."""
        return as_caller(who).entity(entity_id, self.entity_pattern)

    async def read_scope(
        self, who: Principal | Caller, entity_id: str | None, file_ids: Sequence[str] | None
    ) -> Scope:
        """What `who` may read through `entity_id`: those of `file_ids` LibreChat allows it, in order.

        `file_ids` None is a listing: every file of the caller's namespaces (a listing narrows what
        it shows with `searchable`, or a search builds its read scope on the ids it listed).
        """
        caller = as_caller(who)
        entity = caller.entity(entity_id, self.entity_pattern)
        allowed = None if file_ids is None else await self.searchable(caller, entity, file_ids)
        return Scope.of(
            self.collection_id,
            caller.owners(entity),
            uploader=caller.uploader,
            file_ids=allowed,
            legacy_unowned=self.legacy_unowned,
        )

    async def searchable(
        self, who: Principal | Caller, entity: str | None, file_ids: Sequence[str]
    ) -> list[str]:
        """The file ids LibreChat's catalogue lets a LibreChat caller use, in order (a fixed set: all)."""
        caller = as_caller(who)
        if not caller.uses_catalogue:
            return list(dict.fromkeys(file_ids))
        return await self.allowlist.searchable(caller.principal, entity, file_ids)

    async def listed_entity(self, who: Principal | Caller, entity_id: str | None) -> str | None:
        """The checked `entity_id` of a listing; None for an Agent the caller may not use in LibreChat.

        Such an Agent lists as if it were not named, rather than answering that it exists.
        """
        caller = as_caller(who)
        entity = caller.entity(entity_id, self.entity_pattern)
        if (
            entity
            and caller.uses_catalogue
            and not await self.allowlist.agent_visible(caller.principal, entity)
        ):
            return None
        return entity

    def delete_scope(
        self, principal: Principal, file_ids: Sequence[str], *, editor_of: Sequence[str] = ()
    ) -> Scope:
        """What a delete of `file_ids` may touch: the caller's own namespace and the files it uploaded.

        `editor_of`: instead of the caller's namespace, the namespaces of these Agents, which
        LibreChat's catalogue says the caller may edit. Under DELETE_SCOPE=caller any owner's file.
        `entity_id` never widens a delete: LibreChat never sends it on one.
        """
        return Scope.of(
            self.collection_id,
            editor_of or delete_namespaces(principal),
            uploader=principal.namespace,
            file_ids=file_ids,
            legacy_unowned=self.legacy_unowned,
            any_owner=self.delete_any_owner,
        )

    async def delete(self, principal: Principal, file_ids: Sequence[str], delete: Deleter) -> set[str]:
        """Delete with `delete` what the caller may of `file_ids`; the ids it found.

        First the caller's own namespace and the files it uploaded; then, with ALLOWLIST_VERIFY=mongo,
        what is left from the namespaces of Agents the caller may edit in LibreChat (author or EDIT bit).
        """
        found = await delete(self.delete_scope(principal, file_ids))
        missing = [i for i in file_ids if i not in found]
        if missing and self.allowlist.enabled:
            # LibreChat detaches a file from its Agent before it asks us to delete it, so the Agent
            # is found through the editor's rights, not through the file
            editable = await self.allowlist.editable_agents(principal)
            if editable:
                found |= await delete(self.delete_scope(principal, missing, editor_of=editable))
        return found
