"""Authentication (CONTRACT.md section 2) and the error shapes every route shares."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest

from app.errors import EmbeddingProviderError
from tests.contract.helpers import query, upload
from tests.fixtures.service import TEST_JWT_SECRET, SettingsFactory, auth, make_token, new_id, running_app

ROUTES = [
    ("POST", "/query", {"json": {"query": "q", "file_id": "f"}}),
    ("POST", "/query_multiple", {"json": {"query": "q", "file_ids": ["f"]}}),
    ("GET", "/documents", {"params": {"ids": ["f"]}}),
    ("DELETE", "/documents", {"json": ["f"]}),
    ("GET", "/documents/f/context", {}),
    ("GET", "/ids", {}),
    ("POST", "/embed", {"files": {"file": ("a.txt", b"a", "text/plain")}, "data": {"file_id": "f"}}),
    (
        "POST",
        "/embed-upload",
        {"files": {"uploaded_file": ("a.txt", b"a", "text/plain")}, "data": {"file_id": "f"}},
    ),
    ("POST", "/text", {"files": {"file": ("a.txt", b"a", "text/plain")}, "data": {"file_id": "f"}}),
    ("POST", "/local/embed", {"json": {"filepath": "a", "filename": "a", "file_id": "f"}}),
]


def bad_tokens() -> dict[str, str]:
    now = int(time.time())
    return {
        "expired": make_token("u", ttl=-120),
        "no_exp": make_token("u", ttl=None),  # Decision: upstream accepts tokens without exp
        "other_secret": make_token("u", secret="not-the-secret-0123456789abcdef-0123456789abcdef"),
        "alg_none": jwt.encode({"id": "u", "exp": now + 300}, key=None, algorithm="none"),
        "garbage": "abc.def.ghi",
    }


@pytest.mark.parametrize(("method", "path", "kwargs"), ROUTES)
async def test_every_route_needs_a_token(
    client: httpx.AsyncClient, method: str, path: str, kwargs: dict
) -> None:
    r = await client.request(method, path, **kwargs)
    assert r.status_code == 401
    assert r.json() == {"detail": "Missing or invalid Authorization header"}


@pytest.mark.parametrize("kind", ["expired", "no_exp", "other_secret", "alg_none", "garbage"])
async def test_bad_tokens_are_401(client: httpx.AsyncClient, kind: str) -> None:
    token = bad_tokens()[kind]
    r = await client.post(
        "/query", json={"query": "q", "file_id": "f"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 401
    assert r.json()["detail"].startswith("Invalid token: ")


async def test_a_token_signed_with_another_secret_names_the_setting(
    client: httpx.AsyncClient,
) -> None:
    """Before: "Invalid token: signature verification failed", which did not point at JWT_SECRET."""
    other = "not-the-secret-0123456789abcdef-0123456789abcdef"
    token = make_token("u", secret=other)
    r = await client.post(
        "/query", json={"query": "q", "file_id": "f"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 401
    assert r.json() == {
        "detail": "Invalid token: it was not signed with this service's JWT_SECRET; JWT_SECRET must be "
        "the same secret LibreChat signs its tokens with (LibreChat's JWT_SECRET)"
    }
    assert other not in r.text and TEST_JWT_SECRET not in r.text  # no secret echoed


async def test_aud_claim_accepted_when_audience_unset(client: httpx.AsyncClient) -> None:
    # Decision: upstream rejects any token with an aud claim
    token = make_token(new_id("user"), aud="librechat")
    r = await client.get("/ids", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200


async def test_audience_enforced_when_set(settings_factory) -> None:  # type: ignore[no-untyped-def]
    async with running_app(settings_factory(jwt_audience="rag-api")) as c:
        ok = make_token("u", aud="rag-api")
        assert (await c.get("/ids", headers={"Authorization": f"Bearer {ok}"})).status_code == 200
        wrong = make_token("u", aud="other")
        assert (await c.get("/ids", headers={"Authorization": f"Bearer {wrong}"})).status_code == 401


async def test_docs_and_health_are_public(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).status_code == 200
    assert (await client.get("/openapi.json")).status_code == 200
    assert (await client.get("/docs")).status_code == 200


async def test_without_jwt_secret_everyone_is_public(settings_factory) -> None:  # type: ignore[no-untyped-def]
    settings = settings_factory(jwt_secret=None)
    assert settings.bind_host == "127.0.0.1"  # Decision: loopback only unless ALLOW_UNAUTHENTICATED
    async with running_app(settings) as c:
        fid = new_id()
        r = await upload(c, fid, "open.txt", b"Public knowledge about lighthouses.")
        assert r.status_code == 200
        pairs = (await c.post("/query", json={"query": "lighthouses", "file_id": fid})).json()
        assert pairs[0][0]["metadata"]["user_id"] == "public"


async def test_server_error_leaks_nothing(client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    search = client.app.state.services.search  # type: ignore[attr-defined]

    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret-query-text and a connection string postgres://u:p@h/db")

    monkeypatch.setattr(search, "search", boom)
    r = await query(client, "secret-query-text", "f", auth(new_id("user")))
    assert r.status_code == 500
    body = r.json()
    assert body["detail"] == "Internal server error"
    assert body["request_id"] == r.headers["x-request-id"]
    assert "secret" not in r.text and "postgres" not in r.text


async def test_embedding_provider_failure_is_503_and_stores_nothing(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = client.app.state.services.embedder  # type: ignore[attr-defined]

    async def down(texts: object) -> None:
        raise EmbeddingProviderError("The embedding provider did not answer within 60 s")

    monkeypatch.setattr(embedder, "embed_documents", down)
    user, fid = new_id("user"), new_id()
    r = await upload(client, fid, "a.txt", b"This will not be stored.", auth(user))
    assert r.status_code == 503
    assert r.json()["detail"] == "The embedding provider did not answer within 60 s"
    monkeypatch.undo()
    assert fid not in (await client.get("/ids", headers=auth(user))).json()


def test_secret_constant_is_long_enough() -> None:
    # PyJWT warns on HMAC keys under 32 bytes; LibreChat's generated secrets are 64 hex chars
    assert len(TEST_JWT_SECRET) >= 32


async def test_without_jwt_secret_the_local_operator_is_the_admin(settings_factory: SettingsFactory) -> None:
    """JWT_SECRET unset, loopback only (the default): whoever calls is on this machine, the operator,
    who sees where the evidence index and the queue stand (they answered 403 to everyone)."""
    async with running_app(settings_factory(jwt_secret=None)) as c:
        for path in ("/admin/status", "/v2/status", "/v2/runs", "/admin/jobs", "/metrics"):
            r = await c.get(path)
            assert r.status_code == 200, (path, r.text)


async def test_without_jwt_secret_the_admin_403_says_what_is_possible(
    settings_factory: SettingsFactory,
) -> None:
    """Opened beyond loopback without a secret (ALLOW_UNAUTHENTICATED=true), nobody is an admin: the
    403 names JWT_SECRET (and METRICS_TOKEN)."""
    async with running_app(settings_factory(jwt_secret=None, allow_unauthenticated=True)) as c:
        for path in ("/admin/status", "/v2/status"):
            r = await c.get(path)
            assert r.status_code == 403
            assert "without JWT_SECRET" in r.json()["detail"] and "set JWT_SECRET" in r.json()["detail"]
        r = await c.get("/metrics")
        assert r.status_code == 403
        assert "set JWT_SECRET" in r.json()["detail"] and "METRICS_TOKEN" in r.json()["detail"]
    async with running_app(settings_factory()) as c:
        r = await c.get("/metrics", headers=auth(new_id("user")))
        assert r.status_code == 403
        assert "RAG_ADMIN_USER_IDS" in r.json()["detail"] and "METRICS_TOKEN" in r.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/documents", "GET, DELETE"),  # before: "GET" (the first route of the path)
        ("PUT", "/v2/runs", "GET, POST"),  # before: "POST"
        ("PATCH", "/mcp", "GET, HEAD, POST, DELETE"),  # a route outside the OpenAPI document
    ],
)
async def test_a_405_names_every_method_of_its_path(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    r = await client.request(method, path, headers=auth("u-405"))
    assert r.status_code == 405
    assert r.headers["allow"] == allow
    assert r.json() == {"detail": "Method Not Allowed"}
