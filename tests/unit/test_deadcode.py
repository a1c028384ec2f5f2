"""scripts/lib/deadcode.py (vulture): a planted unused function fails, used and whitelisted names pass."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_deadcode() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deadcode", REPO / "scripts" / "lib" / "deadcode.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deadcode"] = module
    spec.loader.exec_module(module)
    return module


deadcode = load_deadcode()

SERVICE = """
from fastapi import APIRouter
from pydantic import BaseModel, field_validator

router = APIRouter()


class Reply(BaseModel):
    model_config = {"frozen": True}

    @field_validator("*")
    @classmethod
    def _strip(cls, value: str) -> str:
        return f"{cls.__name__}: {value}"


def used() -> int:
    return 1


def planted_unused() -> int:
    return used()


@router.get("/ping")
async def ping() -> Reply:
    return Reply.model_validate({"n": used()})
"""


def tree(tmp_path: Path, service: str = SERVICE) -> tuple[Path, Path]:
    """app/service.py and a caller outside the reported tree (like benchmarks/)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "service.py").write_text(service)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "run.py").write_text("from app.service import used\n\nprint(used())\n")
    return tmp_path / "app", tmp_path / "bench"


def test_a_planted_unused_function_is_found_and_nothing_else(tmp_path: Path) -> None:
    app, bench = tree(tmp_path)
    found = deadcode.unused([app, bench], [app], whitelist=None)
    # the route, the validator and model_config are framework-used; `used` has callers
    assert [line.split(": ", 1)[1] for line in found] == ["unused function 'planted_unused' (60% confidence)"]
    assert found[0].startswith(f"{app / 'service.py'}:21:")


def test_a_name_only_a_reader_outside_the_report_uses_is_alive(tmp_path: Path) -> None:
    # nothing in app/ calls `used` any more; bench/run.py still does
    app, bench = tree(tmp_path, SERVICE.replace("return used()", "return 2").replace('"n": used()', '"n": 2'))
    assert any("'used'" in line for line in deadcode.unused([app], [app], whitelist=None))
    assert not any("'used'" in line for line in deadcode.unused([app, bench], [app], whitelist=None))


def test_a_whitelisted_name_passes_and_the_command_exits_non_zero_otherwise(tmp_path: Path) -> None:
    app, bench = tree(tmp_path)
    args = ["deadcode", "--read", str(app), str(bench), "--report", str(app)]
    empty = tmp_path / "none.py"
    empty.write_text("")
    assert deadcode.main([*args, "--whitelist", str(empty)]) == 1
    whitelist = tmp_path / "whitelist.py"
    whitelist.write_text("_.planted_unused  # called by a plugin loader\n")
    assert deadcode.main([*args, "--whitelist", str(whitelist)]) == 0


def test_a_file_vulture_cannot_parse_fails_the_check(tmp_path: Path) -> None:
    app, _ = tree(tmp_path, "def broken(:\n")
    assert deadcode.unused([app], [app], whitelist=None) == [
        "vulture could not read every file (see above): nothing was checked"
    ]
