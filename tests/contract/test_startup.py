"""What the lifespan prepares on the machine: RAG_UPLOAD_DIR exists once the service is up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fixtures.service import SettingsFactory, auth, new_id, running_app


async def test_the_default_upload_dir_is_created(settings_factory: SettingsFactory) -> None:
    settings = settings_factory()
    assert not settings.upload_dir.exists()
    async with running_app(settings) as c:
        assert settings.upload_dir == (settings.data_dir / "uploads").resolve()
        assert settings.upload_dir.is_dir()
        # the documented /local/embed flow works without creating anything by hand
        (settings.upload_dir / "note.txt").write_text("Otters hold hands while sleeping.")
        body = {"filepath": "note.txt", "filename": "note.txt", "file_id": new_id()}
        r = await c.post("/local/embed", json=body, headers=auth(new_id("user")))
        assert r.status_code == 200, r.text


async def test_a_configured_upload_dir_is_created_with_its_parents(
    settings_factory: SettingsFactory, tmp_path: Path
) -> None:
    folder = tmp_path / "deep" / "er" / "uploads"
    async with running_app(settings_factory(rag_upload_dir=folder)):
        assert folder.is_dir()


async def test_an_upload_dir_that_cannot_exist_is_logged_not_fatal(
    settings_factory: SettingsFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.ERROR):
        async with running_app(settings_factory(rag_upload_dir=blocker / "uploads")) as c:
            assert (await c.get("/health")).status_code == 200
    assert any(r.getMessage().startswith("Could not create RAG_UPLOAD_DIR") for r in caplog.records)
