"""A V1 chunk longer than the local model's 256-token window is found by what its tail says.

V1 keeps rag_api's 1,500-character chunks, which often run past the model's window. The chunk
below is one V1 chunk (1,059 characters, 342 word pieces) whose only sentences about the generator
start after token 288, so a model that reads only its first 256 tokens never sees them.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from app.clients.embeddings.local import local_model_counter, shared_runtime
from tests.contract.helpers import upload
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app

FILLER = (
    "Spring planting notes: sow peas (2 rows, 40 cm apart) on 12/03; beans on 20/04; "
    "tomatoes (var. 'Moneymaker', 'Gardener's Delight') under glass until 15/05; water at 07:00 & 19:00; "
    "mulch beds 1-4 with 5 cm compost; check pH (6.5-7.0) every 2 weeks; feed with 4-4-4 NPK. "
) * 3
TAIL = (
    "Generator safety: the emergency generator's fuel shut-off valve is in the red steel cabinet behind "
    "the loading dock. To stop the generator's fuel supply, turn the valve a quarter turn clockwise; "
    "the cabinet key (number 47) hangs in the security office."
)
DISTRACTORS = [
    "The office printer toner is stored in the cupboard next to reception.",
    "Fire extinguishers are checked every month by the facilities team.",
    "Our cafeteria serves lunch from noon until two o'clock.",
]
QUERY = "Where is the emergency generator fuel shut-off valve?"


async def test_a_long_chunk_is_found_by_its_tail(settings_factory: SettingsFactory) -> None:
    target = FILLER + TAIL
    counter, window = local_model_counter()
    assert counter.count(FILLER) > window and len(target) <= 1500  # the tail is past the window

    # Before: the chunk's vector was its first 256 tokens, gardening only. Ranked by that vector the
    # chunk comes after two of the three unrelated distractors (cosine 0.16 against 0.25 and 0.25):
    runtime = shared_runtime()
    query = runtime.embed([QUERY])[0]
    truncated = runtime.embed_truncated([target])[0]
    distractors = runtime.embed(DISTRACTORS)
    assert sum(float(query @ d) > float(query @ truncated) for d in distractors) >= 2
    # After: its windows are pooled, so the tail counts (cosine 0.35, above every distractor)
    pooled = runtime.embed([target])[0]
    assert all(float(query @ pooled) > float(query @ d) for d in distractors)
    assert not np.array_equal(pooled, truncated)

    # ... and through the service: upload (one V1 chunk each), then search
    user = new_id("user")
    async with running_app(settings_factory()) as client:
        ids = {}
        for name, text in [("target", target), *((f"d{i}", t) for i, t in enumerate(DISTRACTORS))]:
            ids[name] = new_id(name)
            response = await upload(client, ids[name], f"{name}.txt", text.encode(), auth(user))
            assert response.status_code == 200, response.text
        response = await client.post(
            "/query_multiple",
            json={"query": QUERY, "file_ids": list(ids.values()), "k": 4},
            headers=auth(user),
        )
        assert response.status_code == 200
        hits = response.json()
        assert len(hits) == 4
        top = hits[0][0]
        assert top["metadata"]["file_id"] == ids["target"] and top["page_content"] == target


async def test_vectors_from_before_windows_are_recomputed_on_re_upload(
    settings_factory: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    user = new_id("user")
    file_id = new_id("file")
    content = "\n\n".join(f"Paragraph {i}. " + FILLER for i in range(4)).encode()

    async def ingested() -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="app.ingest.pipeline"):
            response = await upload(client, file_id, "notes.txt", content, auth(user))
        assert response.status_code == 200, response.text
        return next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Ingested file"))

    async with running_app(settings_factory()) as client:
        first = await ingested()
        chunks = int(re.search(r": (\d+) chunks", first).group(1))  # type: ignore[union-attr]
        assert chunks >= 3 and f"({chunks} embedded, 0 reused)" in first
        assert f"(0 embedded, {chunks} reused)" in await ingested()  # unchanged chunks keep their vectors
        # a file stored before windows existed: same chunks, vectors under the old identity
        async with resources(client).pool.acquire() as conn:
            await conn.execute(
                "UPDATE ragoverlay_files SET embedding_model = 'local:all-MiniLM-L6-v2' WHERE file_id = $1",
                file_id,
            )
        assert f"({chunks} embedded, 0 reused)" in await ingested()
