"""Navigation pages over HTTP: a PDF's table of contents and index, and a Sphinx index page, are
stored (`/documents` and the context route stay complete) but never returned by `/query`,
`/query_multiple` or `/query_v2`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from tests.contract.helpers import agent_id, query, upload
from tests.contract.test_query_v2 import wait_active
from tests.fixtures.documents import make_pdf
from tests.fixtures.service import auth, new_id, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-qv2"  # the name wait_active asks /v2/status as
USER = "uploader-nav"
CONTENTS = "\n".join(
    [
        "Contents",
        "1 Relief valve . . . . . . . . . . . . . . . . . . . . . . . 2",
        "1.1 Relief valve pressure setting . . . . . . . . . . . . . 2",
        "1.2 Relief valve seal kit . . . . . . . . . . . . . . . . . 2",
        "2 Feed pump maintenance . . . . . . . . . . . . . . . . . . 3",
        "2.1 Feed pump filter cartridge . . . . . . . . . . . . . . 3",
    ]
)
VALVE = (
    "1 Relief valve\nThe relief valve of the boiler opens at a pressure of 6.5 bar. "
    "Its pressure setting is sealed at the factory. The seal kit of the relief valve is part 4711."
)
PUMP = "2 Feed pump maintenance\nReplace the filter cartridge of the feed pump every 400 hours of operation."
INDEX = "\n".join(
    [
        "Index",
        "boiler, 2",
        "feed pump, 3",
        "filter cartridge, 3",
        "pressure setting, 2",
        "relief valve, 2",
        "seal kit, 2",
    ]
)
GENINDEX = (
    "<html><head><title>Index</title></head><body><h1 id='index'>Index</h1><table class='indextable'>"
    + "".join(
        f"<tr><td><a href='manual.html#{n}'>relief valve {word}</a></td></tr>"
        for n, word in enumerate(["pressure", "seal kit", "setting", "boiler", "opening", "factory"])
    )
    + "</table></body></html>"
)


@dataclass
class World:
    client: httpx.AsyncClient
    agent: str
    manual: str
    genindex: str


@pytest.fixture(scope="module")
async def world(
    settings_factory: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    folder: Path = tmp_path_factory.mktemp("nav")
    pdf = make_pdf(folder / "manual.pdf", [CONTENTS, VALVE, PUMP, INDEX]).read_bytes()
    async with running_app(settings) as client:
        manual, genindex = new_id("manual"), new_id("genindex")
        r = await upload(
            client, manual, "manual.pdf", pdf, auth(USER), entity_id=agent, content_type="application/pdf"
        )
        assert r.status_code == 200, r.text
        r = await upload(
            client,
            genindex,
            "genindex.html",
            GENINDEX.encode(),
            auth(USER),
            entity_id=agent,
            content_type="text/html",
        )
        assert r.status_code == 200, r.text
        await wait_active(client, agent, 2)
        yield World(client, agent, manual, genindex)


QUESTIONS = ["relief valve pressure setting", "seal kit of the relief valve", "feed pump filter cartridge"]


@pytest.mark.parametrize("question", QUESTIONS)
async def test_query_returns_the_pages_of_content_only(world: World, question: str) -> None:
    r = await query(world.client, question, world.manual, auth(USER), k=10, entity_id=world.agent)
    assert r.status_code == 200, r.text
    pages = [document["metadata"]["page"] for document, _distance in r.json()]
    assert sorted(pages) == [1, 2]  # the valve and pump pages; never the contents (0) or index (3)


async def test_query_multiple_leaves_navigation_pages_out(world: World) -> None:
    body = {
        "query": QUESTIONS[0],
        "file_ids": [world.manual, world.genindex],
        "k": 10,
        "entity_id": world.agent,
    }
    r = await world.client.post("/query_multiple", json=body, headers=auth(USER))
    assert r.status_code == 200, r.text
    found = [(d["metadata"]["file_id"], d["metadata"].get("page")) for d, _distance in r.json()]
    assert sorted(found) == [(world.manual, 1), (world.manual, 2)]


async def test_a_file_that_is_only_navigation_finds_nothing(world: World) -> None:
    r = await query(world.client, "relief valve", world.genindex, auth(USER), entity_id=world.agent)
    assert r.status_code == 200 and r.json() == []
    body = {"query": "relief valve", "file_ids": [world.genindex], "entity_id": world.agent}
    r = await world.client.post("/query_multiple", json=body, headers=auth(USER))
    assert r.status_code == 404  # "no documents found", which LibreChat and the overlay read as empty


async def test_navigation_pages_stay_stored(world: World) -> None:
    params = {"ids": [world.manual, world.genindex], "entity_id": world.agent}
    r = await world.client.get("/documents", params=params, headers=auth(USER))
    assert r.status_code == 200, r.text
    marks = [
        (d["metadata"]["file_id"], d["metadata"].get("page"), d["metadata"].get("navigation"))
        for d in r.json()
    ]
    assert sorted(marks, key=str) == sorted(
        [
            (world.manual, 0, "toc"),
            (world.manual, 1, None),
            (world.manual, 2, None),
            (world.manual, 3, "index"),
            (world.genindex, None, "index"),
        ],
        key=str,
    )
    r = await world.client.get(
        f"/documents/{world.manual}/context", params={"entity_id": world.agent}, headers=auth(USER)
    )
    assert r.status_code == 200
    assert "Relief valve pressure setting" in r.json() and "seal kit, 2" in r.json()


@pytest.mark.parametrize("question", QUESTIONS)
async def test_query_v2_returns_the_pages_of_content_only(world: World, question: str) -> None:
    body = {"query": question, "file_ids": [world.manual, world.genindex], "entity_id": world.agent, "k": 10}
    r = await world.client.post("/query_v2", json=body, headers=auth(USER))
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert results, r.json()
    assert {(hit["file_id"], hit["page"]) for hit in results} <= {(world.manual, 2), (world.manual, 3)}
