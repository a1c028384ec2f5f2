"""`/query_v2` results show the text around their chunk: the neighbouring chunks of the same section
and page, up to RAG_V2__EVIDENCE__CONTEXT_CHARS, each text once (app/evidence/query/passages.py)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from app.config import Settings
from tests.contract.helpers import agent_id
from tests.contract.test_query_v2 import ADMIN, upload_staged
from tests.fixtures.service import auth, resources, running_app

pytestmark = pytest.mark.slow

USER = "user-passages"
PARTS = ("seal", "impeller", "bearing", "valve", "filter", "gasket", "shaft", "coupling") * 2
FILLER = (
    "Record the date in the service log and keep the old part until the next inspection. "
    "Work only on a cold and depressurised unit, with the isolation valves closed and tagged. "
    "Clean the surrounding housing with a dry cloth before anything is opened. "
)


def _paragraph(n: int, part: str) -> str:
    return f"The {part} of stage {n} is replaced every {(n + 1) * 500} operating hours. " + FILLER * 2


MANUAL = (
    "# Pump manual\n\n## Maintenance\n\n"
    + "\n\n".join(_paragraph(n, part) for n, part in enumerate(PARTS))
    + "\n\n## Storage\n\nStore the pump in a frost-free room below 40 percent humidity.\n"
)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


async def test_a_result_shows_its_neighbours_within_its_section_and_each_text_once(
    settings_factory: Callable[..., Settings],
) -> None:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    assert settings.v2.evidence.context_chars == 1500  # the shipped default
    async with running_app(settings) as client:
        fid = await upload_staged(client, agent, "manual.md", MANUAL, USER, prefix="manual")
        body = {"query": "How often is the valve of stage 3 replaced?", "file_ids": [fid], "entity_id": agent}
        service = resources(client).evidence.parts.search
        shipped = service.tuning
        service.tuning = shipped.model_copy(
            update={"evidence": shipped.evidence.model_copy(update={"context_chars": 0})}
        )
        [first_alone] = (await client.post("/query_v2", json={**body, "k": 1}, headers=auth(USER))).json()[
            "results"
        ]
        alone = (await client.post("/query_v2", json={**body, "k": 3}, headers=auth(USER))).json()["results"]
        service.tuning = shipped
        r = await client.post("/query_v2", json={**body, "k": 1}, headers=auth(USER))
        assert r.status_code == 200, r.text
        [first] = r.json()["results"]
        assert "passages" in r.headers["server-timing"]
        widened = (await client.post("/query_v2", json={**body, "k": 3}, headers=auth(USER))).json()[
            "results"
        ]
    assert len(alone) == len(widened) == 3
    maintenance = _flat(MANUAL.split("## Storage")[0])
    assert "valve of stage 3" in first_alone["content"]
    # the chunk itself, with more of its section around it, no longer than the setting allows
    assert _flat(first_alone["content"]) in _flat(first["content"])
    assert len(first["content"]) > len(first_alone["content"])
    assert len(first["content"]) <= max(1500, len(first_alone["content"]))
    # pieces of the section in their order (the chunker's overlap shown once, a cut part marked with
    # an ellipsis), nothing of the next section
    for piece in _flat(first["content"]).split("\u2026"):
        assert piece.strip() in maintenance, piece
    assert "frost-free" not in first["content"]
    # a chunk that is a result of its own is not repeated inside another result
    for i, result in enumerate(widened):
        for j, other in enumerate(alone):
            if i != j:
                assert _flat(other["content"]) not in _flat(result["content"]), (i, j)
    # citations, pages and sections are the chunk's own
    for key in ("citation_id", "file_id", "page", "section", "chunk_kind"):
        assert [w[key] for w in widened] == [a[key] for a in alone]
