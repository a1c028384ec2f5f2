"""The read routes' JSON encoder: orjson where it writes what the standard library wrote, else json."""

import json
import math
import uuid

import pytest

from app.api.jsonbody import json_bytes


def pairs(distance: float, metadata: dict) -> list:
    doc = {
        "id": str(uuid.UUID(int=7)),
        "page_content": 'Grüße, 日本 \u2028 "quoted" \\ tab\t',
        "type": "Document",
    }
    return [[{**doc, "metadata": metadata}, distance]]


def test_same_value_as_the_standard_library_and_utf8_not_escaped() -> None:
    value = pairs(
        0.123456789012345, {"file_id": "f", "page": 3, "ratio": 1e-7, "big": 2**63 - 1, "none": None}
    )
    body = json_bytes(value, floats=[0.123456789012345])
    assert json.loads(body) == json.loads(json.dumps(value, ensure_ascii=False))
    assert "Grüße, 日本".encode() in body  # raw UTF-8, as ensure_ascii=False wrote it
    assert body.startswith(b'[[{"id":')  # compact, as FastAPI's and rag_api's answers are


def test_an_integer_beyond_64_bits_is_written_exactly() -> None:
    # a metadata value rag_api's rows may hold: orjson refuses it, the standard library writes it
    value = pairs(0.5, {"file_id": "f", "huge": 2**70})
    body = json_bytes(value, floats=[0.5])
    assert body == json.dumps(value, ensure_ascii=False).encode()
    assert json.loads(body)[0][0]["metadata"]["huge"] == 2**70


@pytest.mark.parametrize("distance", [math.nan, math.inf])
def test_a_non_finite_distance_is_written_as_before(distance: float) -> None:
    # orjson would write null; the answer keeps what it said before (NaN / Infinity)
    value = pairs(distance, {"file_id": "f"})
    assert json_bytes(value, floats=[distance]) == json.dumps(value, ensure_ascii=False).encode()


def test_a_lone_surrogate_still_cannot_be_encoded() -> None:
    # it cannot be stored either (the edge refuses it); the answer fails as it did, never as mojibake
    with pytest.raises(UnicodeEncodeError):
        json_bytes(["\ud800"])


def test_a_plain_string() -> None:
    assert json_bytes("Grüße\n# PAGE 2") == json.dumps("Grüße\n# PAGE 2", ensure_ascii=False).encode()
