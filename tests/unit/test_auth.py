"""Token checks and namespace rules (CONTRACT.md sections 2 and 3), without HTTP."""

import base64
import hashlib
import hmac
import json
import re
import time

import jwt
import pytest

from app.access.namespaces import check_entity_id, delete_namespaces, read_namespaces, write_owner
from app.access.principal import (
    SIGNED_ELSEWHERE_DETAIL,
    Principal,
    TokenCache,
    anonymous,
    check_time_claims,
    require_admin,
    single_authorization,
    verify_token,
)
from app.config_tuning import DEFAULT_ENTITY_ID_PATTERN
from app.errors import BadRequest, Forbidden, InvalidInput, Unauthorized

SECRET = "unit-test-secret-0123456789abcdef-0123456789abcdef"


def token(claims: dict, secret: str = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, secret, algorithm=alg)


def bearer(t: str) -> str:
    return f"Bearer {t}"


def fresh(**extra: object) -> dict:
    now = int(time.time())
    return {"id": "user-1", "iat": now, "exp": now + 300, **extra}


def test_valid_librechat_token() -> None:
    p = verify_token(bearer(token(fresh())), secret=SECRET, audience=None)
    assert p.user_id == "user-1"
    assert p.namespace == "user-1"
    assert not p.is_admin


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc", "token-without-scheme"])
def test_missing_or_malformed_header(header: str | None) -> None:
    with pytest.raises(Unauthorized) as exc:
        verify_token(header, secret=SECRET, audience=None)
    assert exc.value.detail == "Missing or invalid Authorization header"


def test_expired_token() -> None:
    now = int(time.time())
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(token({"id": "u", "exp": now - 60})), secret=SECRET, audience=None)
    assert exc.value.detail.startswith("Invalid token: ")


def test_token_without_exp_is_refused() -> None:
    # Decision: upstream accepts a token without exp for ever
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(token({"id": "u"})), secret=SECRET, audience=None)
    assert "exp" in exc.value.detail


def test_other_secret() -> None:
    other = token(fresh(), secret="another-secret-0123456789abcdef-0123456789abcdef")
    with pytest.raises(Unauthorized):
        verify_token(bearer(other), secret=SECRET, audience=None)


def test_alg_none_refused() -> None:
    unsigned = jwt.encode(fresh(), key=None, algorithm="none")
    with pytest.raises(Unauthorized):
        verify_token(bearer(unsigned), secret=SECRET, audience=None)


def test_token_without_id() -> None:
    claims = fresh()
    del claims["id"]
    with pytest.raises(Unauthorized):
        verify_token(bearer(token(claims)), secret=SECRET, audience=None)


def test_aud_accepted_when_audience_unset() -> None:
    # Decision: upstream rejects any aud claim
    p = verify_token(bearer(token(fresh(aud="librechat"))), secret=SECRET, audience=None)
    assert p.user_id == "user-1"


def test_aud_must_match_when_set() -> None:
    assert verify_token(bearer(token(fresh(aud="rag"))), secret=SECRET, audience="rag").user_id == "user-1"
    with pytest.raises(Unauthorized):
        verify_token(bearer(token(fresh(aud="other"))), secret=SECRET, audience="rag")
    with pytest.raises(Unauthorized):
        verify_token(bearer(token(fresh())), secret=SECRET, audience="rag")


def test_admin_by_id_or_role() -> None:
    assert verify_token(
        bearer(token(fresh())), secret=SECRET, audience=None, admin_user_ids={"user-1"}
    ).is_admin
    assert verify_token(bearer(token(fresh(role="ADMIN"))), secret=SECRET, audience=None).is_admin
    assert not verify_token(bearer(token(fresh(role="USER"))), secret=SECRET, audience=None).is_admin
    with pytest.raises(Forbidden):
        require_admin(Principal("user-2"))


def test_read_namespaces() -> None:
    user = Principal("u1")
    assert read_namespaces(user, None) == ["u1"]
    assert read_namespaces(user, "") == ["u1"]
    assert read_namespaces(user, "agent_x") == ["u1", "agent_x"]
    assert read_namespaces(anonymous(), None) == ["public"]
    assert read_namespaces(anonymous(), "agent_x") == ["public", "agent_x"]


def test_write_owner() -> None:
    assert write_owner(Principal("u1"), "agent_x") == "agent_x"
    assert write_owner(Principal("u1"), "  ") == "u1"
    assert write_owner(anonymous(), None) == "public"


def test_delete_scope_never_includes_an_entity() -> None:
    assert delete_namespaces(Principal("u1")) == ["u1"]
    assert delete_namespaces(anonymous()) == ["public"]


# --- entity_id claims (ENTITY_ID_PATTERN) ---------------------------------------------------------

AGENT_PATTERN = re.compile(DEFAULT_ENTITY_ID_PATTERN)


@pytest.mark.parametrize("value", [None, "", " ", "\t\n  "])
def test_blank_entity_id_is_absent(value: str | None) -> None:
    # LibreChat may send the form field empty
    assert check_entity_id(value, AGENT_PATTERN) is None


@pytest.mark.parametrize("value", ["agent_abc123", "agent_A-b_C", "agent_" + "x" * 100])
def test_agent_ids_are_honoured(value: str) -> None:
    assert check_entity_id(value, AGENT_PATTERN) == value


@pytest.mark.parametrize(
    "value",
    [
        "user-1",  # a user id: the hole this closes
        "6650f0c2a1b2c3d4e5f60718",  # a MongoDB ObjectId, the shape of LibreChat user ids
        "public",
        "agent_",
        "agent_" + "x" * 101,
        "agent_abc\n",  # full match: no trailing newline slips through `$`
        " agent_abc",
        "agent_abc;drop",
        "xagent_abc",
        "AGENT_abc",
    ],
)
def test_other_entity_ids_are_400_and_name_the_setting(value: str) -> None:
    with pytest.raises(BadRequest) as exc:
        check_entity_id(value, AGENT_PATTERN)
    assert "ENTITY_ID_PATTERN" in exc.value.detail
    assert "LibreChat sends only Agent ids" in exc.value.detail
    if len(value) > len("agent_"):
        assert value.strip() not in exc.value.detail  # the caller's value is not echoed back


def test_dot_star_restores_upstream_trust() -> None:
    assert check_entity_id("user-2", re.compile(".*")) == "user-2"


# --- headers and claims -----------------------------------------------------------------------


def test_exactly_one_authorization_header() -> None:
    assert single_authorization([]) is None
    assert single_authorization(["Bearer a"]) == "Bearer a"
    with pytest.raises(Unauthorized) as exc:
        single_authorization(["Bearer valid", "Bearer forged"])
    assert exc.value.detail == "Missing or invalid Authorization header"


def raw_token(claims: dict, secret: str = SECRET) -> str:
    """A correctly signed HS256 token whose payload JSON is exactly `claims` (PyJWT would reject
    some of these values when encoding)."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps(claims, allow_nan=True).encode())
    signing_input = f"{header}.{payload}".encode()
    signature = b64(hmac.new(secret.encode(), signing_input, hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


@pytest.mark.parametrize(
    "claim_values",
    [
        {"exp": "99999999999"},  # a numeric string: PyJWT alone would accept it
        {"exp": True},
        {"exp": [1]},
        {"exp": float("nan")},
        {"exp": float("inf")},
        {"iat": "1700000000"},
        {"iat": False},
        {"nbf": "0"},
    ],
)
def test_time_claims_must_be_numbers(claim_values: dict) -> None:
    claims = {**fresh(), **claim_values}
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(raw_token(claims)), secret=SECRET, audience=None)
    name = next(iter(claim_values))
    assert exc.value.detail == f"Invalid token: '{name}' must be a number (seconds since the epoch)"


def test_float_times_are_numeric_dates() -> None:
    now = time.time()
    p = verify_token(
        bearer(raw_token({"id": "u", "iat": now, "exp": now + 60.5, "nbf": now - 1.5})),
        secret=SECRET,
        audience=None,
    )
    assert p.user_id == "u"


def test_not_before_and_issued_in_the_future() -> None:
    now = 1_800_000_000
    with pytest.raises(Unauthorized, match="not valid yet"):
        check_time_claims({"exp": now + 600, "nbf": now + 60}, now)
    with pytest.raises(Unauthorized, match="issued in the future"):
        check_time_claims({"exp": now + 600, "iat": now + 60}, now)
    # within the 5 s leeway both are fine, as an expiry 4 s ago is
    check_time_claims({"exp": now - 4, "iat": now + 4, "nbf": now + 4}, now)
    with pytest.raises(Unauthorized, match="expired"):
        check_time_claims({"exp": now - 6}, now)


@pytest.mark.parametrize(
    ("claim", "value"),
    [("id", "user\x00-1"), ("id", "user-\ud800"), ("role", "ADMIN\x00"), ("role", "\udfff")],
)
def test_unsafe_string_claims_are_422(claim: str, value: str) -> None:
    claims = {**fresh(), claim: value}
    with pytest.raises(InvalidInput) as exc:
        verify_token(bearer(raw_token(claims)), secret=SECRET, audience=None)
    (error,) = exc.value.errors
    assert error["loc"] == ["header", "Authorization", claim]
    assert error["type"] == "string_unsafe"
    assert f"Token claim '{claim}'" in str(error["msg"])


def test_a_cached_token_is_still_checked_for_time_and_claims() -> None:
    cache = TokenCache()
    now = time.time()
    t = token({"id": "user-1", "exp": int(now) + 60})
    assert verify_token(bearer(t), secret=SECRET, audience=None, cache=cache).user_id == "user-1"
    assert len(cache) == 1
    assert verify_token(bearer(t), secret=SECRET, audience=None, cache=cache, now=now).user_id == "user-1"
    # the same text after its expiry: refused although its signature is remembered
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(t), secret=SECRET, audience=None, cache=cache, now=now + 3600)
    assert exc.value.detail == "Invalid token: token has expired"


def test_a_cached_token_counts_only_for_its_secret_and_audience() -> None:
    cache = TokenCache()
    t = token(fresh(aud="rag"))
    assert verify_token(bearer(t), secret=SECRET, audience="rag", cache=cache).user_id == "user-1"
    other = "another-secret-0123456789abcdef-0123456789abcdef"
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(t), secret=other, audience="rag", cache=cache)
    assert exc.value.detail == SIGNED_ELSEWHERE_DETAIL
    with pytest.raises(Unauthorized) as exc:
        verify_token(bearer(t), secret=SECRET, audience="other", cache=cache)
    assert exc.value.detail == "Invalid token: audience does not match"


def test_refused_tokens_are_not_remembered_and_the_cache_is_bounded() -> None:
    cache = TokenCache(size=2)
    with pytest.raises(Unauthorized):
        verify_token(bearer("abc.def.ghi"), secret=SECRET, audience=None, cache=cache)
    assert len(cache) == 0
    first, second, third = (token(fresh(id=f"user-{i}")) for i in range(3))
    for t in (first, second, third):
        verify_token(bearer(t), secret=SECRET, audience=None, cache=cache)
    assert len(cache) == 2
    assert cache.get(first, SECRET, None) is None  # the oldest went first
    assert cache.get(third, SECRET, None) is not None
