"""What a caller may read or delete: one typed value, passed from the API layer down to the SQL.

The rule itself lives in SQL, once (`app/store/sql/10_scope.sql`): every read and delete statement
builds the database's `ragoverlay_scope` from these fields with `ragoverlay_caller_scope(...)` and
checks each row with `ragoverlay_in_scope(...)`. This module only carries the fields and renders
that constructor call, always with the same named parameters in the same `$n` positions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

# Every statement that takes a scope binds its fields as $1..$6, in this order; its own parameters
# follow from $7 (SCOPE_PARAMS + 1).
SCOPE_SQL = (
    "ragoverlay_caller_scope(p_collection => $1, p_owners => $2::text[], p_files => $3::text[], "
    "p_uploader => $4, p_legacy_unowned => $5, p_any_owner => $6)"
)
SCOPE_PARAMS = 6


class ScopeError(ValueError):
    """A scope used where it does not belong (a programming error, never a caller's)."""


@dataclass(frozen=True)
class Scope:
    """The rows a caller may touch in one collection.

    Visible: rows of `collection_id`, of a file in `file_ids` (None: every file, for listings),
    whose owner is in `owners`, or whose file `uploader` uploaded into its owner's namespace, or
    that have no owner when `legacy_unowned`. `any_owner` is DELETE_SCOPE=caller (rag_api's rule:
    any valid token deletes any file id) and is refused by every read.
    """

    collection_id: uuid.UUID
    owners: tuple[str, ...]
    uploader: str | None = None
    file_ids: tuple[str, ...] | None = None
    legacy_unowned: bool = False
    any_owner: bool = False

    def __post_init__(self) -> None:
        if not self.owners and not self.any_owner:
            raise ScopeError("a scope needs at least one owner namespace")

    @classmethod
    def of(
        cls,
        collection_id: uuid.UUID,
        owners: Iterable[str],
        *,
        uploader: str | None = None,
        file_ids: Iterable[str] | None = None,
        legacy_unowned: bool = False,
        any_owner: bool = False,
    ) -> Scope:
        """A scope from any iterables: owners and file ids de-duplicated, order kept.

        The uploader is the caller's own namespace, so it is always one of the owners.
        """
        files = tuple(dict.fromkeys(file_ids)) if file_ids is not None else None
        owner_list = list(owners)
        if uploader:
            owner_list.append(uploader)
        return cls(
            collection_id,
            tuple(dict.fromkeys(owner_list)),
            uploader or None,
            files,
            legacy_unowned,
            any_owner,
        )

    def with_files(self, file_ids: Iterable[str]) -> Scope:
        """The same caller, narrowed to `file_ids`."""
        return Scope.of(
            self.collection_id,
            self.owners,
            uploader=self.uploader,
            file_ids=file_ids,
            legacy_unowned=self.legacy_unowned,
            any_owner=self.any_owner,
        )

    def for_reading(self) -> Scope:
        """This scope, checked to be one a read may use."""
        if self.any_owner:
            raise ScopeError("an any-owner scope (DELETE_SCOPE=caller) is for deletes only")
        return self

    def sql_args(self) -> tuple[object, ...]:
        """The values of SCOPE_SQL's $1..$6."""
        return (
            self.collection_id,
            list(self.owners),
            list(self.file_ids) if self.file_ids is not None else None,
            self.uploader,
            self.legacy_unowned,
            self.any_owner,
        )
