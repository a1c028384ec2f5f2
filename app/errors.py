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
    └── ServiceUnavailable        503: feature disabled / database down

`detail` is always written by us: never exception text from a library, a provider's body or
the user's query, so nothing sensitive can leak through an error response.
"""

from __future__ import annotations


class RagError(Exception):
    """Base class: an error with an HTTP status and a client-safe detail."""

    status_code: int = 500
    default_detail: str = "Internal server error"

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or self.default_detail
        super().__init__(self.detail)


class BadRequest(RagError):
    """The request is understood but cannot be served as asked."""

    status_code = 400
    default_detail = "Bad request"


class Unauthorized(RagError):
    """Missing or invalid credentials."""

    status_code = 401
    default_detail = "Missing or invalid Authorization header"


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
    """The file was read, but holds no text to index (empty, blank, or scanned images only)."""

    status_code = 422
    default_detail = (
        "The file has no extractable text, so nothing was indexed. A scanned PDF or an image needs "
        "OCR, which this service does not do: run OCR on it (or export it as text or as a PDF with a "
        "text layer) and upload it again."
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


class ConfigError(Exception):
    """Invalid configuration, raised at start-up with a message naming the variable."""
