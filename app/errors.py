"""The service's exception tree, and the one place that maps it to HTTP.

    RagError                      base; carries status, a client-safe detail
    ├── BadRequest                400: request is well-formed JSON but not acceptable
    ├── Unauthorized              401: missing/invalid token
    ├── Forbidden                 403: authenticated, not allowed
    ├── NotFound                  404: nothing in the caller's scope
    ├── Conflict                  409: the resource is not in a state that allows this
    ├── PayloadTooLarge           413: upload over MAX_UPLOAD_BYTES
    ├── UnsupportedFileType       415: undecodable or unsupported binary
    ├── InvalidInput              422: body fails validation outside pydantic
    ├── NoExtractableText         422: the upload holds no text to index
    ├── UpstreamUnavailable       502/503: a dependency we call failed
    │   ├── EmbeddingProviderError
    │   └── BlobStoreError
    ├── ServiceUnavailable        503: feature disabled / service starting
    │   └── DatabaseUnavailable   503: the database cannot be reached (see `database_unavailable`)
    └── RateLimited               429: the caller's per-minute budget is spent (`Retry-After`)

`detail` is always written by us: never exception text from a library, a provider's body or
the user's query, so nothing sensitive can leak through an error response.
"""

from __future__ import annotations

import errno
import socket

import asyncpg


class RagError(Exception):
    """Base class: an error with an HTTP status and a client-safe detail."""

    status_code: int = 500
    default_detail: str = "Internal server error"

    def __init__(self, detail: str | None = None, *, headers: dict[str, str] | None = None) -> None:
        self.detail = detail or self.default_detail
        # response headers the answer carries (WWW-Authenticate on a 401, Retry-After on a 429, a
        # search's Server-Timing on its 404)
        self.headers = headers
        super().__init__(self.detail)


class BadRequest(RagError):
    """The request is understood but cannot be served as asked."""

    status_code = 400
    default_detail = "Bad request"


class Unauthorized(RagError):
    """Missing or invalid credentials."""

    status_code = 401
    default_detail = "Missing or invalid Authorization header"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(RagError):
    """Valid credentials without the needed right."""

    status_code = 403
    default_detail = "Forbidden"


class NotFound(RagError):
    """Nothing in the caller's scope matches."""

    status_code = 404
    default_detail = "Not found"


class Conflict(RagError):
    """The resource exists but its state does not allow the operation (e.g. activating a partial run)."""

    status_code = 409
    default_detail = "Conflict"


class PayloadTooLarge(RagError):
    """The upload exceeds MAX_UPLOAD_BYTES."""

    status_code = 413
    default_detail = "Upload too large"


class UnsupportedFileType(RagError):
    """The file cannot be turned into text."""

    status_code = 415
    default_detail = "Unsupported file type"


class InvalidInput(RagError):
    """Input that fails validation outside pydantic (e.g. multipart fields)."""

    status_code = 422
    default_detail = "Request validation failed"

    def __init__(self, errors: list[dict[str, object]]) -> None:
        self.errors = errors
        super().__init__("Request validation failed")


class NoExtractableText(RagError):
    """The file was read, but holds no text to index (empty, blank, or pictures OCR could not read).

    The loaders raise it with their own detail for scans and pictures (OCR off, or nothing read)."""

    status_code = 422
    default_detail = (
        "The file has no extractable text, so nothing was indexed: it holds no words, only blank "
        "pages or empty parts. Check that it was saved with its content, and upload it again."
    )


# a text file with nothing in it: OCR is not the answer, its content is
EMPTY_FILE_DETAIL = (
    "The file is empty (it holds no characters, or only spaces and line breaks), so nothing was "
    "indexed: check that it was saved with its content, and upload it again."
)


class UpstreamUnavailable(RagError):
    """A dependency we call (embedding provider, blob store) failed."""

    status_code = 502
    default_detail = "An upstream service failed"

    def __init__(self, detail: str | None = None, *, retryable: bool = True) -> None:
        # retryable: a timeout/429/5xx that may clear (503); otherwise a hard failure (502)
        self.retryable = retryable
        self.status_code = 503 if retryable else 502
        super().__init__(detail)


class EmbeddingProviderError(UpstreamUnavailable):
    """The embedding provider failed or returned something unusable."""

    default_detail = "The embedding provider is unavailable; try again later"


class BlobStoreError(UpstreamUnavailable):
    """The blob store (local folder or S3) failed."""

    default_detail = "The file storage is unavailable; try again later"


class ServiceUnavailable(RagError):
    """The service or a feature cannot answer right now."""

    status_code = 503
    default_detail = "Service unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    """The database cannot be reached right now (down, restarting, or no connection free in time)."""

    default_detail = (
        "The database is unavailable (it is restarting or unreachable); try again in a few seconds"
    )


class RateLimited(RagError):
    """The caller spent its per-minute budget for this kind of request."""

    status_code = 429
    default_detail = "Too many requests; try again later"

    def __init__(self, detail: str | None = None, *, retry_after_s: int = 1) -> None:
        self.retry_after_s = max(1, retry_after_s)
        super().__init__(detail, headers={"Retry-After": str(self.retry_after_s)})


# asyncpg's InterfaceError also reports programming errors; only these messages mean a lost connection.
# "released back to the pool": asyncpg hands a pooled connection the server closed back to its pool
# itself, and the next statement on it says so (a server that died between acquire and statement)
_CLOSED_CONNECTION_WORDS = (
    "connection is closed",
    "connection was closed",
    "pool is closing",
    "released back to the pool",
)


_SOCKET_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ETIMEDOUT,
    }
)


def database_unavailable(exc: BaseException) -> bool:
    """True when `exc` means "the database cannot be reached", not "this request is wrong".

    The one classification of connection-class failures: asyncpg's connection errors (class 08,
    `ConnectionDoesNotExistError` ...), a server that is shutting down, starting up or out of
    connection slots, a closed connection or pool, and the OS refusing or resetting the socket.
    A statement that ran and failed (a syntax error, a constraint) is not one of them.
    """
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(
        exc,
        (
            asyncpg.PostgresConnectionError,
            asyncpg.CannotConnectNowError,
            asyncpg.AdminShutdownError,
            asyncpg.CrashShutdownError,
            asyncpg.TooManyConnectionsError,
            # the client's protocol state broke when the server vanished mid-operation ("cannot
            # switch to state 12; another operation is in progress"): that connection is lost too
            asyncpg.InternalClientError,
        ),
    ):
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        text = str(exc).lower()
        return any(words in text for words in _CLOSED_CONNECTION_WORDS)
    if isinstance(exc, socket.gaierror):  # the database host's name does not resolve (right now)
        return True
    if not isinstance(exc, OSError):
        return False
    if exc.errno is None and str(exc).startswith("Multiple exceptions"):
        return True  # asyncio's connect to a name with several addresses, all refused
    # a refused, reset or unreachable socket; not a file error, and not a bare timeout (no errno)
    return exc.errno in _SOCKET_ERRNOS


class ConfigError(Exception):
    """Invalid configuration, raised at start-up with a message naming the variable."""
