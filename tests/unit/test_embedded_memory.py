"""Embedded PostgreSQL memory sizing follows the host (pure)."""

from app.store.embedded import memory_settings_mb

GIB = 1024**3


def test_small_host_keeps_a_floor() -> None:
    # 512 MiB: 512 / 8 = 64 MB shared buffers (the floor), cache 512 / 2 = 256 MB
    assert memory_settings_mb(GIB // 2) == (64, 256)


def test_mid_host_scales() -> None:
    # 4 GiB: 4096 / 8 = 512 MB, cache 2048 MB
    assert memory_settings_mb(4 * GIB) == (512, 2048)


def test_large_host_caps_shared_buffers() -> None:
    # 64 GiB: 65536 / 8 = 8192 capped at 2048 MB; cache 32768 MB
    assert memory_settings_mb(64 * GIB) == (2048, 32768)
