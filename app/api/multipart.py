"""Streaming multipart parsing: the file goes straight to disk, hashed and size-checked as it arrives.

We parse the body ourselves (python-multipart's low-level parser) instead of letting the framework
spool the whole form first, so an oversized upload is refused with 413 from Content-Length before
any parsing, or as soon as the file part passes MAX_UPLOAD_BYTES, and never fills memory or /tmp.
The file lands in this process's temporary folder (`app/ingest/tempfiles.py`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.exceptions import HTTPException

from app.errors import BadRequest, InvalidInput, PayloadTooLarge
from app.ingest.tempfiles import process_temp_dir
from app.safe_text import UNSAFE_ERROR_TYPE, unsafe_reason

logger = logging.getLogger(__name__)

# Text fields (file_id, entity_id, storage_metadata) are small; anything bigger is not ours.
MAX_FIELD_BYTES = 64 * 1024
MAX_FIELDS = 32
# Multipart framing and the text fields ride on top of the file in Content-Length.
FORM_OVERHEAD_BYTES = 1024 * 1024

_FILENAME_STAR = re.compile(r"filename\*\s*=\s*([^;]+)", re.IGNORECASE)
# RFC 5987 charsets; anything else (say `unicode_escape`, which decodes to arbitrary code points) is
# ignored in favour of the plain `filename` parameter
_FILENAME_CHARSETS = frozenset({"utf-8", "utf8", "iso-8859-1", "latin-1", "latin1"})


@dataclass
class SavedUpload:
    """An uploaded file on local disk, plus the form's text fields."""

    path: Path
    filename: str
    content_type: str | None
    size: int
    sha256: str
    fields: dict[str, str] = field(default_factory=dict)

    def cleanup(self) -> None:
        """Remove the temporary file."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def check_content_length(header: str | None, max_upload_bytes: int) -> None:
    """Refuse (413) a body whose declared length cannot fit, before reading any of it."""
    if header is None:
        return
    try:
        declared = int(header)
    except ValueError:
        raise BadRequest("Content-Length must be an integer") from None
    if declared > max_upload_bytes + FORM_OVERHEAD_BYTES:
        raise PayloadTooLarge(_too_large_detail(max_upload_bytes))


def _too_large_detail(limit: int) -> str:
    return (
        f"The upload is larger than MAX_UPLOAD_BYTES ({limit} bytes); "
        "upload a smaller file or ask the operator to raise the limit"
    )


def _decode_filename(disposition: bytes, params: dict[bytes, bytes]) -> str | None:
    """Filename of a part, preferring RFC 5987 `filename*` over `filename`."""
    raw = disposition.decode("latin-1")
    star = _FILENAME_STAR.search(raw)
    if star:
        value = star.group(1).strip().strip('"')
        charset, _, rest = value.partition("'")
        _, _, encoded = rest.partition("'")
        charset = (charset or "utf-8").strip().lower()
        if encoded and charset in _FILENAME_CHARSETS:
            with contextlib.suppress(LookupError, UnicodeDecodeError):
                return urllib.parse.unquote(encoded, encoding=charset or "utf-8", errors="strict")
    name = params.get(b"filename")
    if name is None:
        return None
    # Browsers and Node's form-data send UTF-8 bytes in the quoted filename.
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        # UTF-8 apart from encoded surrogates (ED A0..BF ..): invalid Unicode, not a legacy charset
        return name.decode("utf-8", "surrogatepass")  # the caller refuses it (lone surrogates)
    except UnicodeDecodeError:
        return name.decode("latin-1")  # old clients send the page's charset


async def receive_multipart(
    content_type: str | None,
    body: AsyncIterator[bytes],
    *,
    file_field: str,
    dest_dir: Path,
    max_upload_bytes: int,
    text_fields: Collection[str] | None = None,
) -> SavedUpload:
    """Parse a multipart body: the `file_field` part to a temp file in `dest_dir`, text fields to a dict.

    Only `text_fields` are kept (every named field when None); other parts are skipped unread. Kept
    fields must be UTF-8 without NUL, and the file name must be storable: 422 otherwise.
    """
    ctype, params = parse_options_header(content_type or "")
    boundary = params.get(b"boundary")
    if ctype != b"multipart/form-data" or not boundary:
        raise InvalidInput(
            [_error(("body",), "missing", "Expected a multipart/form-data body with a file and a file_id")]
        )
    # small metadata and page-cache writes: cheaper inline than a thread hop per 64 KiB piece
    dest_dir = process_temp_dir(dest_dir)

    state = _PartState(file_field, dest_dir, max_upload_bytes, text_fields)
    parser = MultipartParser(
        boundary,
        callbacks={
            "on_part_begin": state.on_part_begin,
            "on_part_data": state.on_part_data,
            "on_part_end": state.on_part_end,
            "on_header_field": state.on_header_field,
            "on_header_value": state.on_header_value,
            "on_header_end": state.on_header_end,
            "on_headers_finished": state.on_headers_finished,
        },
    )
    try:
        async for chunk in body:
            if chunk:
                parser.write(chunk)
                # a file over the limit is refused mid-stream (raised from the callbacks)
        parser.finalize()
    except (PayloadTooLarge, InvalidInput, BadRequest, HTTPException):
        # HTTPException: the body stopped arriving (408) or was refused on the way in
        state.discard()
        raise
    except Exception:
        state.discard()
        raise InvalidInput([_error(("body",), "value_error", "Malformed multipart body")]) from None
    return state.result()


def _error(loc: tuple[str, ...], kind: str, msg: str) -> dict[str, object]:
    return {"type": kind, "loc": list(loc), "msg": msg}


class _PartState:
    """Callback target for MultipartParser: tracks the current part and writes the file part."""

    def __init__(
        self, file_field: str, dest_dir: Path, limit: int, text_fields: Collection[str] | None = None
    ) -> None:
        self.file_field = file_field
        self.text_fields = frozenset(text_fields) if text_fields is not None else None
        self.dest_dir = dest_dir
        self.limit = limit
        self.fields: dict[str, str] = {}
        self._headers: dict[bytes, bytes] = {}
        self._hfield = b""
        self._hvalue = b""
        self._name: str | None = None
        self._is_file_part = False
        self._skip = False
        self._buf = bytearray()
        self._fh: IO[bytes] | None = None
        self._path: Path | None = None
        self._hash = hashlib.sha256()
        self._size = 0
        self._filename: str | None = None
        self._ctype: str | None = None
        self._have_file = False

    # headers
    def on_part_begin(self) -> None:
        self._headers = {}
        self._name = None
        self._is_file_part = False
        self._skip = False
        self._buf = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._hfield += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._hvalue += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._hfield.lower()] = self._hvalue
        self._hfield = b""
        self._hvalue = b""

    def on_headers_finished(self) -> None:
        disposition = self._headers.get(b"content-disposition", b"")
        _, params = parse_options_header(disposition)
        raw_name = params.get(b"name")
        self._name = raw_name.decode("utf-8", "replace") if raw_name is not None else None
        filename = _decode_filename(disposition, params)
        if self._name == self.file_field and filename is not None and self._have_file:
            raise InvalidInput(
                [_error(("body", self.file_field), "duplicate", "Send one file part, not several")]
            )
        if self._name == self.file_field and filename is not None:
            reason = unsafe_reason(filename)
            if reason is not None:
                raise InvalidInput(
                    [_error(("body", self.file_field), UNSAFE_ERROR_TYPE, f"The file name {reason}")]
                )
            self._is_file_part = True
            self._have_file = True
            self._filename = filename
            ctype = self._headers.get(b"content-type")
            self._ctype = ctype.decode("latin-1").strip() if ctype else None
            fd, name = tempfile.mkstemp(prefix="upload-", dir=self.dest_dir)
            self._path = Path(name)
            self._fh = os.fdopen(fd, "wb")
        elif (
            filename is not None
            or self._name is None
            or len(self.fields) >= MAX_FIELDS
            or (self.text_fields is not None and self._name not in self.text_fields)
        ):
            self._skip = True  # other file parts, nameless parts and unknown fields are ignored

    # body
    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self._is_file_part:
            self._size += len(piece)
            if self._size > self.limit:
                raise PayloadTooLarge(_too_large_detail(self.limit))
            self._hash.update(piece)
            assert self._fh is not None
            self._fh.write(piece)
        elif not self._skip:
            self._buf += piece
            if len(self._buf) > MAX_FIELD_BYTES:
                raise InvalidInput(
                    [
                        _error(
                            ("body", self._name or "field"),
                            "string_too_long",
                            f"Form field is longer than {MAX_FIELD_BYTES} bytes",
                        )
                    ]
                )

    def on_part_end(self) -> None:
        if self._is_file_part:
            assert self._fh is not None
            self._fh.close()
            self._fh = None
        elif not self._skip and self._name is not None:
            if self._name in self.fields:
                # which one would count? refuse rather than pick (an entity_id above all)
                raise InvalidInput(
                    [
                        _error(
                            ("body", self._name),
                            "duplicate",
                            f"Form field '{self._name}' is given more than once",
                        )
                    ]
                )
            self.fields[self._name] = self._text(self._name, bytes(self._buf))

    @staticmethod
    def _text(name: str, raw: bytes) -> str:
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(
                [_error(("body", name), "string_unicode", f"Form field '{name}' is not valid UTF-8")]
            ) from None
        reason = unsafe_reason(value)
        if reason is not None:
            raise InvalidInput([_error(("body", name), UNSAFE_ERROR_TYPE, f"Form field '{name}' {reason}")])
        return value

    def discard(self) -> None:
        """Close and delete a partially written file."""
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()

    def result(self) -> SavedUpload:
        """The parsed upload; 422 when the file part is missing."""
        if not self._have_file or self._path is None:
            self.discard()
            raise InvalidInput([_error(("body", self.file_field), "missing", "Field required")])
        if self._fh is not None:  # body ended inside the file part
            self.discard()
            raise InvalidInput([_error(("body",), "value_error", "Malformed multipart body")])
        return SavedUpload(
            path=self._path,
            filename=self._filename or "",
            content_type=self._ctype,
            size=self._size,
            sha256=self._hash.hexdigest(),
            fields=self.fields,
        )
