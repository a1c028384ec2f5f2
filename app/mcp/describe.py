"""What a model reads about the MCP tools: the server's instructions, each tool's description and
the argument schemas, with the bounds they state."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from app.evidence.query import schemas as v2_schemas
from app.schemas import MAX_K as V1_MAX_K
from app.schemas import MAX_QUERY_CHARS as V1_MAX_QUERY_CHARS

V1_DEFAULT_K = 5  # one more than /query's 4: a tool call is one search, not one per file
READ_DEFAULT_CHARS = 20_000
READ_MAX_CHARS = 100_000
LIST_DEFAULT = 100
LIST_MAX = 500
JOBS_MAX = 200

INSTRUCTIONS = (
    "Search and read the knowledge bases this service holds for you (LibreChat's files and Agent "
    "knowledge bases). Use rag_list to see which files you can search, rag_search to find passages "
    "(mode v2 answers with citation ids and may refuse when nothing supports an answer), and "
    "rag_read to page through a file's full text. Cite file names and pages from the results."
)

DESCRIPTIONS: dict[str, str] = {
    "rag_search": (
        "Search the knowledge bases you may read for passages that answer a question. Returns "
        "results with file_id, filename and page; in v2 mode also citation_id (cite it as given), "
        "section and, when the evidence does not support an answer, safe_refusal: then say you "
        "cannot answer from the files. Snippets are capped; use rag_read for the full text. An "
        "empty results list means nothing in your files matched."
    ),
    "rag_read": (
        "Read a file's full text as the model sees it in LibreChat: the file name on the first "
        "line, then the text with '# PAGE n' markers. Paginated by character offset: call again "
        "with next_offset until it is null. A file you cannot read answers as not found."
    ),
    "rag_list": (
        "List the files you can search: id, name, type, size, chunk count, namespace and whether "
        "the V2 index has it. Paginated: pass next_cursor to get the next page (null: last page). "
        "An empty list means no file is stored for you."
    ),
    "rag_status": (
        "Who the service takes you for (principal, auth mode, admin), which namespaces you read "
        "and which of them V2 serves; admins also see the job queue's counts."
    ),
    "rag_jobs": (
        "Background jobs (uploads, V2 indexing) you asked for, newest first; admins see every "
        "job. An empty list means none."
    ),
    "rag_reindex": (
        "Admins only: queue the V2 index backfill of a namespace (force: rebuild every file). "
        "Returns the job id; follow it with rag_jobs."
    ),
}


# --- what a model reads: descriptions and argument schemas ------------------------------------------
QueryArg = Annotated[
    str,
    Field(
        description="What to look for, in natural language or exact terms (1.."
        f"{v2_schemas.MAX_QUERY_CHARS} chars in v2, 1..{V1_MAX_QUERY_CHARS} in v1)"
    ),
]
FileIdsArg = Annotated[
    list[str] | None,
    Field(
        description="Only these file ids (up to 1,000, from rag_list). Leave out to search every file "
        "you can read."
    ),
]
EntityArg = Annotated[
    str | None,
    Field(
        description="A LibreChat Agent id (agent_...) whose knowledge base to include. Leave out for "
        "your own files."
    ),
]
ModeArg = Annotated[
    Literal["v1", "v2"] | None,
    Field(
        description="v2: cited evidence (citation ids, page, section) and a refusal sentence when "
        "nothing supports an answer; v1: nearest passages by meaning. Default: v2 where the namespace "
        "has it, else v1."
    ),
]
KArg = Annotated[
    int | None,
    Field(
        description=f"How many results: 1..{v2_schemas.MAX_K} for v2 (default {v2_schemas.DEFAULT_K}), "
        f"1..{V1_MAX_K} for v1 (default {V1_DEFAULT_K})"
    ),
]
FileIdArg = Annotated[str, Field(description="The file to read (a file id from rag_list or rag_search)")]
OffsetArg = Annotated[
    int | None, Field(description="Character offset to start at (0, or a previous next_offset)")
]
ReadLimitArg = Annotated[
    int | None,
    Field(description=f"Characters to return, 1..{READ_MAX_CHARS} (default {READ_DEFAULT_CHARS})"),
]
CursorArg = Annotated[
    str | None, Field(description="next_cursor from the previous page; leave out for the first")
]
ListLimitArg = Annotated[
    int | None, Field(description=f"Files per page, 1..{LIST_MAX} (default {LIST_DEFAULT})")
]
JobStatusArg = Annotated[
    Literal["queued", "running", "done", "failed"] | None, Field(description="Only jobs in this state")
]
BeforeArg = Annotated[int | None, Field(description="next_before from the previous page")]
JobsLimitArg = Annotated[int | None, Field(description=f"Jobs per page, 1..{JOBS_MAX} (default 50)")]
NamespaceArg = Annotated[str, Field(description="The user or Agent id whose files to index again")]
ForceArg = Annotated[bool, Field(description="Parse and embed every file again, unchanged ones too (slower)")]
