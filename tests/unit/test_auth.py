"""Token checks and namespace rules (CONTRACT.md sections 2 and 3), without HTTP."""

import time

import jwt
import pytest

from app.auth import (
    Principal,
    anonymous,
    read_namespaces,
    require_admin,
    verify_token,
    write_owner,
)
from app.errors import Forbidden, Unauthorized

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
