"""An upload and a delete racing on the same content never lose the stored original.

The delete of file A decides its original is unreferenced and is about to remove it; meanwhile an
upload of file B with the same bytes stores (finds) the original and commits a row that refers to
it. The removal must not happen behind that row's back: either it waits for the upload and keeps
the original, or the upload stores it again.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from app.clients.blobs import BlobStore, blob_key
from tests.contract.helpers import upload
from tests.fixtures.patience import ceiling
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app


class PausingDeletes:
    """A blob store whose `delete` stops until the test lets it go on."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.delete_started = asyncio.Event()
        self.go_on = asyncio.Event()

    async def delete(self, key: str) -> None:
        self.delete_started.set()
        await self.go_on.wait()
        await self.inner.delete(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_delete_racing_an_upload_of_the_same_content_keeps_the_original(
    settings_factory: SettingsFactory, tmp_path: Path
) -> None:
    content = b"Puffins nest in burrows on the cliff top. " * 20
    key = blob_key(hashlib.sha256(content).hexdigest())
    user = new_id("user")
    async with running_app(settings_factory()) as c:
        ingest = resources(c).ingest
        first, second = new_id(), new_id()
        assert (await upload(c, first, "a.txt", content, auth(user))).status_code == 200
        real = ingest.blobs
        assert await real.exists(key)
        pausing = PausingDeletes(real)
        ingest.blobs = pausing  # type: ignore[assignment]
        try:
            deleting = asyncio.create_task(
                c.request("DELETE", "/documents", json=[first], headers=auth(user))
            )
            await asyncio.wait_for(pausing.delete_started.wait(), ceiling(30))
            uploading = asyncio.create_task(upload(c, second, "b.txt", content, auth(user)))
            # the upload either finishes now (nothing holds it back) or waits for the removal
            await asyncio.wait({uploading}, timeout=2.0)
            pausing.go_on.set()
            deleted, uploaded = await asyncio.gather(deleting, uploading)
        finally:
            ingest.blobs = real
        assert deleted.status_code == 200, deleted.text
        assert uploaded.status_code == 200, uploaded.text
        async with resources(c).pool.acquire() as conn:
            stored = await conn.fetchval(
                "SELECT blob_key FROM ragoverlay_files WHERE collection_id = $1 AND file_id = $2",
                resources(c).info.collection_id,
                second,
            )
        assert stored == key
        assert await real.exists(key), "the original of file B was removed by the delete of file A"
        assert await real.get_bytes(key) == content
