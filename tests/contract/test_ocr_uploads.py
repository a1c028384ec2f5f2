"""Scans and pictures over HTTP: an image-only PDF and a photo of a table (German and English) found by
`/query` and `/query_v2`, PDF_EXTRACT_IMAGES picking up the text inside a PDF's pictures, `/embed`'s
report of the pages OCR read and those that stayed empty, and the 422 that says how to turn OCR on."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from app.config import Settings
from tests.contract.helpers import agent_id, query, upload
from tests.contract.test_admin_jobs import wait_job
from tests.contract.test_query_v2 import wait_active
from tests.fixtures.scans import image_pdf, mixed_pdf, png_bomb, save, table_image, text_image
from tests.fixtures.service import auth, new_id, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-qv2"  # the name wait_active asks /v2/status as
USER = "uploader-ocr"
GERMAN = ["Die Prüfspannung der Heizpatrone beträgt 1500 V.", "Der Wärmeübertrager ist wartungsfrei."]
ENGLISH = [
    "The relief valve of the boiler opens at 6.5 bar.",
    "Replace the filter cartridge every 400 hours.",
]
TABLE = [["Modell", "Leistung", "Gewicht"], ["K 28", "2,8 kW", "12 kg"], ["K 35", "3,5 kW", "14 kg"]]
IN_PICTURE = "Inside the picture: the seal kit is part 4711."
# enough characters for a text layer (OCR_MIN_CHARS): the page itself is not read by OCR
PUMPS = "This page has a text layer about the feed pumps of the boiler."


@dataclass
class World:
    client: httpx.AsyncClient
    agent: str
    files: dict[str, str]  # name -> file id
    answers: dict[str, dict[str, Any]]  # name -> /embed's answer


def _files(folder: Path) -> dict[str, tuple[bytes, str]]:
    return {
        "scan.pdf": (
            image_pdf(folder / "scan.pdf", [text_image(ENGLISH), text_image(GERMAN, turn=90)]).read_bytes(),
            "application/pdf",
        ),
        "table.jpg": (save(table_image(TABLE), folder / "table.jpg", quality=70).read_bytes(), "image/jpeg"),
        "mixed.pdf": (
            mixed_pdf(folder / "mixed.pdf", PUMPS, text_image([IN_PICTURE])).read_bytes(),
            "application/pdf",
        ),
        # a scan whose second page is a blank sheet: OCR finds nothing there
        "partly.pdf": (
            image_pdf(
                folder / "partly.pdf", [text_image(ENGLISH), Image.new("L", (600, 800), 255)]
            ).read_bytes(),
            "application/pdf",
        ),
    }


@pytest.fixture(scope="module")
async def world(
    settings_factory: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN], pdf_extract_images=True)
    folder = tmp_path_factory.mktemp("scans")
    async with running_app(settings) as client:
        files: dict[str, str] = {}
        answers: dict[str, dict[str, Any]] = {}
        for name, (content, content_type) in _files(folder).items():
            file_id = new_id(name.split(".")[0])
            r = await upload(
                client, file_id, name, content, auth(USER), entity_id=agent, content_type=content_type
            )
            assert r.status_code == 200, r.text
            files[name], answers[name] = file_id, r.json()
        await wait_active(client, agent, len(files))
        yield World(client, agent, files, answers)


async def _top(world: World, text: str, name: str) -> dict[str, Any]:
    r = await query(world.client, text, world.files[name], auth(USER), k=1, entity_id=world.agent)
    assert r.status_code == 200, r.text
    (document, _distance), *_ = r.json()
    assert isinstance(document, dict)
    return document


async def test_embed_reports_the_pages_ocr_read(world: World) -> None:
    answer = dict(world.answers["scan.pdf"])
    # an Agent evidence search serves: the answer also says where its evidence index stands
    assert answer.pop("evidence")["searchable"] in (True, False)
    assert answer == {
        "status": True,
        "message": "File processed successfully.",
        "file_id": world.files["scan.pdf"],
        "filename": "scan.pdf",
        "known_type": True,
        "ocr_pages": [1, 2],
    }
    assert world.answers["table.jpg"]["ocr_pages"] == [1]
    assert world.answers["mixed.pdf"]["ocr_pages"] == [1]  # the picture on its text page


async def test_a_partly_unreadable_scan_names_its_empty_pages(world: World) -> None:
    assert world.answers["partly.pdf"]["ocr_pages"] == [1]
    assert world.answers["partly.pdf"]["empty_pages"] == [2]


async def test_an_upload_run_as_a_job_reports_its_ocr_pages_in_the_result(
    world: World, tmp_path: Path
) -> None:
    content = image_pdf(
        tmp_path / "partly-async.pdf", [text_image(ENGLISH), Image.new("L", (600, 800), 255)]
    ).read_bytes()
    r = await world.client.post(
        "/embed",
        params={"async": "true"},
        data={"file_id": new_id("partly-async"), "entity_id": world.agent},
        files={"file": ("partly-async.pdf", content, "application/pdf")},
        headers=auth(USER),
    )
    assert r.status_code == 202, r.text
    done = await wait_job(world.client, r.json()["status_url"], auth(USER), "done", "failed")
    assert done["status"] == "done", done
    assert done["result"]["ocr_pages"] == [1] and done["result"]["empty_pages"] == [2]


@pytest.mark.parametrize(
    ("question", "name", "expected", "page"),
    [
        ("Wie hoch ist die Prüfspannung der Heizpatrone?", "scan.pdf", "Prüfspannung", 1),
        ("At what pressure does the relief valve open?", "scan.pdf", "relief valve", 0),
        ("Gewicht des K 35", "table.jpg", "K 35", 0),
    ],
)
async def test_query_finds_scanned_and_photographed_text(
    world: World, question: str, name: str, expected: str, page: int
) -> None:
    document = await _top(world, question, name)
    assert expected in document["page_content"]
    metadata = document["metadata"]
    assert metadata["page"] == page and metadata["ocr"] is True
    assert 0.5 < metadata["ocr_confidence"] <= 1.0
    assert metadata["file_id"] == world.files[name] and metadata["source"] == name


@pytest.mark.parametrize(
    ("question", "name", "expected"),
    [
        ("Prüfspannung der Heizpatrone", "scan.pdf", "1500 V"),
        ("What weighs the K 35?", "table.jpg", "14"),
        ("seal kit part number", "mixed.pdf", "4711"),
    ],
)
async def test_query_v2_reads_the_same_loaders(world: World, question: str, name: str, expected: str) -> None:
    body = {"query": question, "file_ids": list(world.files.values()), "entity_id": world.agent, "k": 3}
    r = await world.client.post("/query_v2", json=body, headers=auth(USER))
    assert r.status_code == 200, r.text
    hits = [hit for hit in r.json()["results"] if hit["file_id"] == world.files[name]]
    assert hits, r.json()
    assert expected in hits[0]["content"]
    assert hits[0]["metadata"]["ocr"] is True and 0.5 < hits[0]["metadata"]["ocr_confidence"] <= 1.0


async def test_pdf_extract_images_picks_up_the_text_inside_pictures(world: World) -> None:
    document = await _top(world, "Which part is the seal kit?", "mixed.pdf")
    assert "4711" in document["page_content"] and document["metadata"]["ocr"] is True
    r = await world.client.get("/documents", params={"ids": [world.files["mixed.pdf"]]}, headers=auth(USER))
    contents = [d["page_content"] for d in r.json()]
    assert contents[0] == PUMPS  # the text layer stays as it was


async def test_without_pdf_extract_images_pictures_on_text_pages_are_not_read(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    pdf = mixed_pdf(tmp_path / "mixed.pdf", PUMPS, text_image([IN_PICTURE])).read_bytes()
    async with running_app(settings_factory()) as client:
        fid = new_id()
        r = await upload(client, fid, "mixed.pdf", pdf, auth(USER), content_type="application/pdf")
        assert r.status_code == 200 and "ocr_pages" not in r.json()
        r = await client.get("/documents", params={"ids": [fid]}, headers=auth(USER))
        assert [d["page_content"] for d in r.json()] == [PUMPS]


async def test_with_ocr_off_a_scan_and_a_picture_say_how_to_turn_it_on(
    settings_factory: Callable[..., Settings], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scan = image_pdf(tmp_path / "scan.pdf", [text_image(ENGLISH)]).read_bytes()
    picture = save(text_image(GERMAN), tmp_path / "p.png").read_bytes()
    with caplog.at_level(logging.INFO):
        async with running_app(settings_factory(ocr_engine="off", pdf_extract_images=True)) as client:
            fid = new_id()
            r = await upload(client, fid, "scan.pdf", scan, auth(USER), content_type="application/pdf")
            assert r.status_code == 422
            assert "OCR is turned off (OCR_ENGINE=off)" in r.json()["detail"]
            assert "ask the operator to set OCR_ENGINE=auto" in r.json()["detail"]
            r = await upload(client, fid, "p.png", picture, auth(USER), content_type="image/png")
            assert r.status_code == 422 and "OCR_ENGINE=auto" in r.json()["detail"]
            assert fid not in (await client.get("/ids", headers=auth(USER))).json()
    at_start = [r.getMessage() for r in caplog.records if r.name == "app.main"]
    assert (
        "OCR is not available (OCR is turned off (OCR_ENGINE=off)): scanned PDFs and pictures are refused "
        "(422); PDF_EXTRACT_IMAGES has no effect"
    ) in at_start


async def test_a_decompression_bomb_is_413_and_nothing_is_stored(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    fid = new_id()
    bomb = png_bomb(tmp_path / "bomb.png").read_bytes()
    r = await upload(client, fid, "bomb.png", bomb, auth(USER), content_type="image/png")
    assert r.status_code == 413
    assert "30,000 x 30,000 pixels" in r.json()["detail"] and "OCR_MAX_PIXELS" in r.json()["detail"]
    assert fid not in (await client.get("/ids", headers=auth(USER))).json()
