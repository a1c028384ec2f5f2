"""A scan read by OCR once per upload: the V2 index's file job reads the parse V1's ingest kept.

In a module of its own: the job queue is shared by every app on the test database, and an app of
another module still running (a module-scoped fixture) could take the file job, with a data folder
of its own and so no kept parse (as another replica would: then the scan is read twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from app.config import Settings
from tests.contract.helpers import agent_id, upload
from tests.contract.test_ocr_uploads import ADMIN, ENGLISH, USER
from tests.contract.test_query_v2 import wait_active
from tests.fixtures.scans import image_pdf, text_image
from tests.fixtures.service import auth, new_id, running_app

pytestmark = pytest.mark.slow


async def test_the_v2_index_reuses_the_uploads_ocr_instead_of_reading_the_scan_again(
    settings_factory: Callable[..., Settings], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_id()
    scan = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH)]).read_bytes()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    with caplog.at_level(logging.INFO):
        async with running_app(settings) as client:
            fid = new_id("reuse")
            r = await upload(
                client, fid, "scan.pdf", scan, auth(USER), entity_id=agent, content_type="application/pdf"
            )
            assert r.status_code == 200 and r.json()["ocr_pages"] == [1], r.text
            await wait_active(client, agent, 1)
            body = {"query": "relief valve pressure", "file_ids": [fid], "entity_id": agent, "k": 1}
            r = await client.post("/query_v2", json=body, headers=auth(USER))
            (hit,) = r.json()["results"]
            assert "6.5 bar" in hit["content"] and hit["metadata"]["ocr"] is True
    reused = [r.getMessage() for r in caplog.records if r.name == "app.ingest.parse_cache"]
    # the V2 index's file job read the upload's parse: the page went through OCR once
    assert reused == ["Parse of 'scan.pdf' reused: the same bytes and options were parsed moments ago"]
