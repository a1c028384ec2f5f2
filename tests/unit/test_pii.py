"""The PII detectors (app/text/pii.py), PII_REDACT's parsing, and each remote client's redaction."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.clients.redaction import redactor_for
from app.config import load_settings
from app.errors import ConfigError
from app.evidence.query.rerank_http import HttpReranker
from app.text.pii import KINDS, LOG_KINDS, Redactor
from benchmarks.pii import load_cases, parse_case, score
from tests.fixtures.fake_providers import FakeProvider, chat_user_text


def kinds(text: str, redactor: Redactor | None = None) -> list[tuple[str, str]]:
    return [(s.kind, s.value) for s in (redactor or Redactor()).spans(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mail max.muster+info@example.co.uk now", [("EMAIL", "max.muster+info@example.co.uk")]),
        ("Ruf an: 030 12345678.", [("PHONE", "030 12345678")]),
        ("Mobil 0171/2345678", [("PHONE", "0171/2345678")]),
        ("Zentrale +49 (0)89 12345-678", [("PHONE", "+49 (0)89 12345-678")]),
        ("Hotline (202) 555-0178 ab 8 Uhr", [("PHONE", "(202) 555-0178")]),
        ("IBAN DE89 3704 0044 0532 0130 00.", [("IBAN", "DE89 3704 0044 0532 0130 00")]),
        ("Karte 4111 1111 1111 1111", [("CARD", "4111 1111 1111 1111")]),
        ("host 192.0.2.17 and 2001:db8::1", [("IPV4", "192.0.2.17"), ("IPV6", "2001:db8::1")]),
        ("Musterstraße 12a, 10115 Berlin", [("ADDRESS", "Musterstraße 12a, 10115 Berlin")]),
        ("at 221 Baker Street today", [("ADDRESS", "221 Baker Street")]),
    ],
)
def test_each_kind_is_found(text: str, expected: list[tuple[str, str]]) -> None:
    assert kinds(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "IBAN DE00 1203 0000 0000 2020 51 (wrong check digits)",
        "Card 4111 1111 1111 1112 fails Luhn; 0000 0000 0000 0000 is no card",
        "Gültig ab 07.04.2025, Faktor 0.986893273527251, Wert 31.01875",
        "Limit 2147483609 bytes, order 2024-11-30-0042, version 2.14.3",
        "loopback 127.0.0.1, ::1 and 0.0.0.0 name no one's machine",
        "12:30:45 and 00:1A:2B:3C:4D:5E are no IPv6 addresses",
        "The K 28 heater weighs 12 kg and draws 2.8 kW at 230 V.",
    ],
)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert kinds(text) == []


def test_placeholders_number_each_distinct_value_and_keep_the_rest() -> None:
    text = "a@example.com wrote to b@example.com; a@example.com again, IBAN DE89370400440532013000."
    assert Redactor().redact(text) == "<EMAIL_1> wrote to <EMAIL_2>; <EMAIL_1> again, IBAN <IBAN_1>."
    assert Redactor().redact("nothing here") == "nothing here"


def test_an_iban_is_not_also_a_phone_number_and_kinds_can_be_chosen() -> None:
    assert kinds("Konto DE02 1203 0000 0000 2020 51") == [("IBAN", "DE02 1203 0000 0000 2020 51")]
    only_logs = Redactor(LOG_KINDS)
    assert kinds("db 10.0.0.5 mail x@example.org", only_logs) == [("EMAIL", "x@example.org")]
    with pytest.raises(ValueError, match="NAME"):
        Redactor(["NAME"])
    assert set(KINDS) >= set(LOG_KINDS)


def test_the_hand_written_set_parses_and_scores() -> None:
    case = parse_case("en|write to [[EMAIL:a@example.com]] or [[PHONE:030 1234567]].")
    assert case.text == "write to a@example.com or 030 1234567."
    assert [(k, case.text[s:e]) for k, s, e in case.marks] == [
        ("EMAIL", "a@example.com"),
        ("PHONE", "030 1234567"),
    ]
    tally = score([case, parse_case("de|Version 1.2.3.4 ist neu.")])
    assert (tally["EMAIL"]["tp"], tally["PHONE"]["tp"]) == (1, 1)
    assert tally["IPV4"]["fp"] == 1  # a four-part version number reads as an address: counted
    cases = load_cases()
    assert len(cases) >= 60 and {c.lang for c in cases} == {"en", "de"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ["logs"]),
        ("embeddings, Reranker", ["embeddings", "reranker"]),
        ("all", ["embeddings", "reranker", "contextual", "logs"]),
        ("none", []),
    ],
)
def test_pii_redact_names_destinations(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: list[str]
) -> None:
    if value is None:
        monkeypatch.delenv("PII_REDACT", raising=False)
    else:
        monkeypatch.setenv("PII_REDACT", value)
    assert load_settings(_env_file=None).pii_redact == expected


def test_pii_redact_refuses_an_unknown_destination(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PII_REDACT", "embeddings,mail")
    with pytest.raises(ConfigError, match="unknown destinations \\['mail'\\]"):
        load_settings(_env_file=None)


def test_a_destination_not_named_gets_no_redactor() -> None:
    assert redactor_for("reranker", ["embeddings"]) is None
    redact = redactor_for("reranker", ["reranker"])
    assert redact is not None and redact("call 030 12345678") == "call <PHONE_1>"


async def test_the_http_reranker_sends_the_question_and_passages_redacted() -> None:
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"results": []})

    reranker = HttpReranker(
        httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        "http://rerank.test/rerank",
        redact=redactor_for("reranker", ["reranker"]),
    )
    body = reranker.body("who is x@example.org?", ["write to x@example.org", "call 030 12345678"])
    assert body["query"] == "who is <EMAIL_1>?"
    assert body["documents"] == ["write to <EMAIL_1>", "call <PHONE_1>"]


async def test_the_contextual_chat_endpoint_gets_redacted_messages() -> None:
    from app.clients.chat import ChatClient

    fake = FakeProvider()
    fake.url = "http://chat.test"
    client = ChatClient(
        base_url=fake.url + "/v1",
        model="m",
        api_key=None,
        timeout_s=5,
        transport=fake.transport(),
        redact=redactor_for("contextual", ["contextual"]),
    )
    try:
        await client.complete(
            [{"role": "user", "content": "Passage: mail x@example.org, IBAN DE89370400440532013000"}]
        )
    finally:
        await client.aclose()
    sent = chat_user_text(fake.requests[0])
    assert "x@example.org" not in sent and "<EMAIL_1>" in sent and "<IBAN_1>" in sent
