"""The whole service with originals in a real S3 server (SeaweedFS): stored on upload, removed on delete."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from tests.contract.helpers import query, upload
from tests.fixtures.s3_server import S3Server
from tests.fixtures.service import SettingsFactory, auth, new_id, running_app

pytestmark = pytest.mark.s3


async def test_originals_live_in_s3(settings_factory: SettingsFactory, s3_server: S3Server) -> None:
    prefix = f"it-{uuid.uuid4().hex[:8]}/"
    settings = settings_factory(
        s3_bucket=s3_server.bucket,
        s3_endpoint_url=s3_server.endpoint_url,
        s3_region=s3_server.region,
        s3_access_key_id=s3_server.access_key,
        s3_secret_access_key=s3_server.secret_key,
        s3_force_path_style=True,
        s3_prefix=prefix,
    )
    s3 = s3_server.client()
    content = b"Originals of uploaded files are kept in S3 under their SHA-256."
    digest = hashlib.sha256(content).hexdigest()
    async with running_app(settings) as c:
        user, a, b = new_id("user"), new_id(), new_id()
        assert (await upload(c, a, "s3.txt", content, auth(user))).status_code == 200
        assert (await upload(c, b, "copy.txt", content, auth(user))).status_code == 200  # same bytes
        keys = [
            o["Key"] for o in s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("Contents", [])
        ]
        assert keys == [f"{prefix}sha256/{digest[:2]}/{digest[2:4]}/{digest}"]  # stored once
        assert (await query(c, "where are originals kept", a, auth(user))).json()
        assert (await c.request("DELETE", "/documents", json=[a], headers=auth(user))).status_code == 200
        # still referenced by the other file
        assert s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("KeyCount") == 1
        assert (await c.request("DELETE", "/documents", json=[b], headers=auth(user))).status_code == 200
        assert s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix).get("KeyCount") == 0


async def test_wrong_s3_credentials_fail_uploads_not_the_service(
    settings_factory: SettingsFactory, s3_server: S3Server
) -> None:
    settings = settings_factory(
        s3_bucket=s3_server.bucket,
        s3_endpoint_url=s3_server.endpoint_url,
        s3_region=s3_server.region,
        s3_access_key_id=s3_server.access_key,
        s3_secret_access_key="wrong-secret",
        s3_force_path_style=True,
    )
    async with running_app(settings) as c:
        # searches keep working while the blob store is misconfigured or down; uploads say why
        assert (await c.get("/health")).json() == {"status": "UP"}
        user, fid = new_id("user"), new_id()
        r = await upload(c, fid, "a.txt", b"not stored", auth(user))
        # refused credentials do not clear by retrying: a hard 502 (a timeout or 5xx would be 503)
        assert r.status_code == 502
        assert "S3" in r.json()["detail"]  # says what to fix, without echoing the provider
        assert fid not in (await c.get("/ids", headers=auth(user))).json()
