"""Chunk ids: UUIDv7 (RFC 9562) issued in chunk order.

Time-ordered ids keep a file's chunks adjacent in the primary-key index and let us return chunks in
document order without adding a key to rag_api's metadata. Within one call the 12-bit `rand_a`
field is a counter, and the millisecond is bumped when it wraps, so ids are strictly increasing.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0


def uuid7_batch(n: int) -> list[uuid.UUID]:
    """`n` strictly increasing version-7 UUIDs."""
    global _last_ms
    with _lock:
        ms = max(int(time.time() * 1000), _last_ms + 1)
        _last_ms = ms + n // 4096  # reserve the milliseconds this batch may use
    out: list[uuid.UUID] = []
    for i in range(n):
        stamp = ms + i // 4096
        counter = i % 4096
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (stamp & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= counter << 64
        value |= 0b10 << 62
        value |= rand_b
        out.append(uuid.UUID(int=value))
    return out
