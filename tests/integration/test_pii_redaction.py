"""PII_REDACT over real sockets: a fake embedding provider and a fake reranker see no e-mail address,
phone number or IBAN of an uploaded document when redaction is on, and do when it is off; the stored
text, V1's answer and the evidence search (its lexical and exact channels run here on the original
text) keep them."""

from __future__ import annotations

import logging

import pytest

from app.logs import configure_logging
from tests.contract.helpers import query, upload
from tests.fixtures.fake_providers import FakeProvider
from tests.fixtures.patience import until
from tests.fixtures.service import SettingsFactory, auth, new_id, running_app

pytestmark = pytest.mark.slow

ADMIN = "admin-pii"
USER = "user-pii"
EMAIL = "anna.muster@example.de"
PHONE = "+49 30 12345678"
IBAN = "DE89 3704 0044 0532 0130 00"
DOCUMENT = (
    "Service contact for the K 28 heater\n\n"
    f"For repairs write to {EMAIL} or call {PHONE} on working days.\n"
    f"Refunds for the K 28 heater go to the account {IBAN} within 14 days.\n\n"
    "The K 28 heater weighs 12 kg and draws 2.8 kW at 230 V.\n"
)


def _leaks(texts: list[str]) -> set[str]:
    """Which of the document's three pieces of personal data appear in `texts`."""
    joined = "\n".join(texts)
    found = {
        "email": EMAIL in joined,
        "phone": "12345678" in joined,
        "iban": "37040044" in joined.replace(" ", ""),
    }
    return {name for name, hit in found.items() if hit}


@pytest.mark.parametrize("redact", [True, False], ids=["redaction on", "redaction off"])
async def test_remote_parties_receive_no_personal_data_when_redaction_is_on(
    settings_factory: SettingsFactory, fake_provider: FakeProvider, fake_reranker: FakeProvider, redact: bool
) -> None:
    agent = f"agent_{new_id('pii')}"
    settings = settings_factory(
        embeddings_provider="openai",
        openai_api_key="sk-test",
        openai_base_url=fake_provider.url + "/v1",
        embedding_max_retries=0,
        v2_namespace_ids=[agent],
        admin_user_ids=[ADMIN],
        v2={"rerank": {"backend": "http", "url": fake_reranker.url + "/rerank", "timeout_ms": 5000}},
        pii_redact=["embeddings", "reranker"] if redact else ["none"],
    )
    file_id = new_id("contact")
    async with running_app(settings) as client:
        r = await upload(client, file_id, "contact.txt", DOCUMENT.encode(), auth(USER), entity_id=agent)
        assert r.status_code == 200, r.text

        async def answered() -> bool:
            reply = await client.post(
                "/query_v2",
                json={"query": f"Whom do I write to, {EMAIL}?", "file_ids": [file_id], "entity_id": agent},
                headers=auth(USER),
            )
            return reply.status_code == 200 and bool(reply.json()["results"])

        await until(answered, what="/query_v2 answering from the upload", within_s=120, every_s=0.3)
        v2 = await client.post(
            "/query_v2",
            json={"query": f"Whom do I write to, {EMAIL}?", "file_ids": [file_id], "entity_id": agent},
            headers=auth(ADMIN),
            params={},
        )
        v1 = await query(client, "repairs e-mail address", file_id, auth(USER))
    assert v2.status_code == 200, v2.text
    # the evidence keeps the original text, found by the e-mail address the question names
    assert EMAIL in v2.json()["results"][0]["content"]
    assert v1.status_code == 200 and EMAIL in v1.json()[0][0]["page_content"]
    embedded = [t for request in fake_provider.requests for t in fake_provider.texts_of(request)]
    reranked = [t for request in fake_reranker.requests for t in fake_reranker.texts_of(request)]
    assert embedded and reranked, "both remote parties were asked"
    if redact:
        assert _leaks(embedded) == set(), embedded
        assert _leaks(reranked) == set(), reranked
        assert any("<EMAIL_1>" in t for t in embedded) and any("<IBAN_1>" in t for t in embedded)
        assert any("<EMAIL_1>" in t for t in reranked)  # the question's address too
    else:
        assert _leaks(embedded) == {"email", "phone", "iban"}
        assert "email" in _leaks(reranked)


def test_log_lines_lose_personal_data_but_keep_addresses_of_servers(caplog: pytest.LogCaptureFixture) -> None:
    configure_logging(debug=False, console_json=False, redact=True)
    root = logging.getLogger()
    handler = next(h for h in root.handlers if getattr(h, "_ragoverlay", False))
    record = logging.LogRecord(
        "ragoverlay.test", logging.WARNING, __file__, 1, "mail %s from %s failed", (EMAIL, "10.0.0.5"), None
    )
    for f in handler.filters:
        f.filter(record)
    assert record.getMessage() == "mail <EMAIL_1> from 10.0.0.5 failed"
    configure_logging(debug=False, console_json=False, redact=False)
    handler = next(h for h in root.handlers if getattr(h, "_ragoverlay", False))
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "mail %s", (EMAIL,), None)
    for f in handler.filters:
        f.filter(record)
    assert record.getMessage() == f"mail {EMAIL}"
