"""scripts/lib/archcheck.py on small fake trees (cycles, sizes, the baseline), and on today's app/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_archcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location("archcheck", REPO / "scripts" / "lib" / "archcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["archcheck"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


archcheck = load_archcheck()


def plant(tmp_path: Path, files: dict[str, str], name: str = "app") -> Path:
    """A package `name` under tmp_path with these files (paths below it), each package with an __init__."""
    root = tmp_path / name
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            (root / parent / "__init__.py").touch()
        path.write_text(text)
    return root


def problems(root: Path, baseline: str = "") -> list[str]:
    path = root.parent / "baseline.txt"
    path.write_text(baseline)
    return archcheck.check(root, path, root.parent)


def test_todays_app_passes_with_its_baseline() -> None:
    assert archcheck.check(archcheck.DEFAULT_ROOT, archcheck.DEFAULT_BASELINE, REPO) == []


def test_todays_benchmarks_and_scripts_pass_with_the_baseline() -> None:
    roots = [REPO / "benchmarks", REPO / "scripts"]
    assert roots == list(archcheck.DEFAULT_ROOTS[1:])  # what scripts/lint checks besides app/
    assert archcheck.check(roots, archcheck.DEFAULT_BASELINE, REPO) == []


def test_a_file_cycle_fails_with_its_chain_and_import_sites(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "pkg/a.py": "from app.pkg import b\n",
            # inside a function and relative: still an import
            "pkg/b.py": "import os\n\n\ndef later():\n    from . import c\n",
            "pkg/c.py": "from .a import something\n",
        },
    )
    [found] = problems(root)
    assert found.splitlines() == [
        "import cycle between modules: app.pkg.a -> app.pkg.b -> app.pkg.c -> app.pkg.a",
        "    app.pkg.a -> app.pkg.b  at app/pkg/a.py:1",
        "    app.pkg.b -> app.pkg.c  at app/pkg/b.py:5",
        "    app.pkg.c -> app.pkg.a  at app/pkg/c.py:1",
    ]


def test_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "pkg/a.py": "from app.pkg import b\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from app.pkg import a\n"
                "else:\n    import json\n"
            ),
        },
    )
    assert problems(root) == []
    (root / "pkg/b.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import app.pkg.a\n"
    )
    [found] = problems(root)
    assert found.splitlines()[0] == "import cycle between modules: app.pkg.a -> app.pkg.b -> app.pkg.a"


def test_a_package_cycle_without_a_file_cycle_fails(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "store/rows.py": "from app.evidence.query.terms import split\n",
            "evidence/query/terms.py": "def split(): ...\n",
            "evidence/query/plan.py": "import app.store.rows\n",
            # top-level modules are nodes of their own; evidence.query is apart from evidence
            "config.py": "from app.search import service\n",
            "search/service.py": "",
            "evidence/jobs.py": "from app.evidence.query import plan\n",
        },
    )
    [found] = problems(root)
    assert found.splitlines() == [
        "import cycle between packages: evidence.query -> store -> evidence.query",
        "    evidence.query -> store  at app/evidence/query/plan.py:1",
        "    store -> evidence.query  at app/store/rows.py:1",
    ]


def test_a_listed_cycle_passes_and_a_line_that_matches_nothing_fails(tmp_path: Path) -> None:
    root = plant(tmp_path, {"p/a.py": "from app.p import b\n", "p/b.py": "from app.p import a\n"})
    # written from any node of the cycle: the same cycle
    assert problems(root, "module-cycle app.p.b -> app.p.a -> app.p.b  # tolerated for now\n") == []
    (root / "p/b.py").write_text("")
    [stale] = problems(root, "# header\nmodule-cycle app.p.a -> app.p.b -> app.p.a\n")
    assert stale.startswith("baseline.txt:2: `module-cycle app.p.a -> app.p.b -> app.p.a` no longer occurs")
    assert "delete that line" in stale


def test_a_601_line_file_fails_and_600_lines_pass(tmp_path: Path) -> None:
    root = plant(tmp_path, {"big.py": "x = 1\n" * 601})
    assert problems(root) == ["file app/big.py has 601 lines, over the limit of 600"]
    (root / "big.py").write_text("x = 1\n" * 600)
    assert problems(root) == []


def function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly `lines` lines from `def` to its end, decorated (decorators do not count)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}@staticmethod\n{indent}def {name}():\n{body}"


def test_an_81_line_function_or_method_fails_and_80_lines_pass(tmp_path: Path) -> None:
    root = plant(
        tmp_path, {"mod.py": function("fine", 80) + "\n\nclass Box:\n" + function("grown", 81, "    ")}
    )
    assert problems(root) == ["function app/mod.py:Box.grown has 81 lines, over the limit of 80"]


def test_a_listed_offender_may_shrink_not_grow_and_a_fixed_one_must_go(tmp_path: Path) -> None:
    root = plant(tmp_path, {"mod.py": function("long", 90)})
    listed = "function-lines app/mod.py:long 90\n"
    assert problems(root, listed) == []
    (root / "mod.py").write_text(function("long", 85))
    assert problems(root, listed) == []  # smaller, still over: allowed
    (root / "mod.py").write_text(function("long", 91))
    [grown] = problems(root, listed)
    assert grown.startswith("function app/mod.py:long has grown to 91 lines (baseline.txt:1 allows 90")
    (root / "mod.py").write_text(function("long", 80))
    [fixed] = problems(root, listed)
    assert "is no longer over 80 lines" in fixed and "delete that line" in fixed


def test_prune_only_deletes_and_lowers(tmp_path: Path) -> None:
    root = plant(tmp_path, {"mod.py": function("long", 85), "p/a.py": "from app.p import b\n", "p/b.py": ""})
    baseline = root.parent / "baseline.txt"
    baseline.write_text(
        "# kept\nmodule-cycle app.p.a -> app.p.b -> app.p.a\nfunction-lines app/mod.py:long 90\n"
        "file-lines app/gone.py 700\n"
    )
    changes = archcheck.prune(root, baseline, root.parent)
    assert len(changes) == 3
    assert baseline.read_text() == "# kept\nfunction-lines app/mod.py:long 85\n"
    # a new problem is never written into the baseline
    (root / "p/b.py").write_text("from app.p import a\n")
    archcheck.prune(root, baseline, root.parent)
    assert baseline.read_text() == "# kept\nfunction-lines app/mod.py:long 85\n"
    assert len(problems(root, baseline.read_text())) == 1


def test_a_malformed_baseline_line_is_reported(tmp_path: Path) -> None:
    root = plant(tmp_path, {"a.py": ""})
    assert problems(root, "module-cycle app.a -> app.b\nsize app/a.py 3\n") == [
        "baseline.txt line 1: a cycle is written `module-cycle a -> b -> a`: 'module-cycle app.a -> app.b'",
        "baseline.txt line 2: unknown entry 'size': 'size app/a.py 3'",
    ]


def test_the_command_exits_non_zero_on_a_problem(tmp_path: Path) -> None:
    root = plant(tmp_path, {"p/a.py": "from app.p import b\n", "p/b.py": "from app.p import a\n"})
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert archcheck.main(["archcheck", "--root", str(root), "--baseline", str(empty)]) == 1
    empty.write_text("module-cycle app.p.a -> app.p.b -> app.p.a\n")
    assert archcheck.main(["archcheck", "--root", str(root), "--baseline", str(empty)]) == 0


def test_too_many_cycles_to_list_name_the_import_they_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archcheck, "MAX_CYCLES", 3)
    # four cycles low -> top -> xN -> low, all through the one import of top by low
    files = {"p/low.py": "from app.p import top\n", "p/top.py": "from app.p import x1, x2, x3, x4\n"}
    files.update({f"p/x{i}.py": "from app.p import low\n" for i in range(1, 5)})
    root = plant(tmp_path, files)
    [found] = problems(root, "module-cycle app.p.gone -> app.p.low -> app.p.gone\n")  # not called stale
    lines = found.splitlines()
    assert lines[0].startswith("import cycles between modules: more than 3, too many to list")
    assert lines[1] == "    app.p.low -> app.p.top  at app/p/low.py:1  (4 cycles)"
    assert "  for example app.p.low -> app.p.top -> app.p.x1 -> app.p.low" in lines


def test_a_router_that_imports_the_store_or_acquires_a_connection_fails(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "store/queries.py": "HEALTH = 'SELECT 1'\n",
            "services.py": "from app.store import queries\n",
            "api/fine.py": "from app import services\n",
            "api/sql.py": "import json\n\nfrom app.store.queries import HEALTH\n",
            "api/pool.py": (
                "async def health(pool):\n    async with pool.acquire() as conn:\n        return conn\n"
            ),
        },
    )
    assert problems(root) == [
        "app/api/sql.py:3: router app.api.sql imports app.store.queries: routers call a service; "
        "SQL and its records stay in app/store/ and the services",
        "app/api/pool.py:2: a router acquires a database connection: call a service that does",
    ]


def test_benchmarks_get_the_sizes_and_module_cycles_not_app_s_layer_rules(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "big.py": "x = 1\n" * 601,
            "mod.py": function("long", 81),
            "a.py": "from benchmarks import b\n",
            "b.py": "import benchmarks.a\n",
            # app's layer rules do not apply: a package cycle without a file cycle, a module named api
            # importing one named store and acquiring a connection
            "quality/x.py": "from benchmarks import y\n",
            "y.py": "from benchmarks.quality import z\n",
            "quality/z.py": "",
            "api/r.py": "from benchmarks.store import q\n\n\ndef f(pool):\n    return pool.acquire()\n",
            "store/q.py": "",
        },
        name="benchmarks",
    )
    found = problems(root)
    assert found[:1] == [
        "import cycle between modules: benchmarks.a -> benchmarks.b -> benchmarks.a\n"
        "    benchmarks.a -> benchmarks.b  at benchmarks/a.py:1\n"
        "    benchmarks.b -> benchmarks.a  at benchmarks/b.py:1"
    ]
    assert found[1:] == [
        "file benchmarks/big.py has 601 lines, over the limit of 600",
        "function benchmarks/mod.py:long has 81 lines, over the limit of 80",
    ]


def test_a_module_of_a_folder_of_scripts_imports_its_siblings_by_name(tmp_path: Path) -> None:
    """scripts/lib/ has no __init__.py: `import b` there is scripts/lib/b.py, as Python runs a script."""
    root = tmp_path / "scripts"
    (root / "lib").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "lib" / "a.py").write_text("import os\n\nimport b\n")
    (root / "lib" / "b.py").write_text("import sys\n\nfrom a import thing\n")
    [found] = problems(root)
    assert found.splitlines() == [
        "import cycle between modules: scripts.lib.a -> scripts.lib.b -> scripts.lib.a",
        "    scripts.lib.a -> scripts.lib.b  at scripts/lib/a.py:3",
        "    scripts.lib.b -> scripts.lib.a  at scripts/lib/b.py:3",
    ]
    (root / "lib" / "b.py").write_text("import sys\n")
    assert problems(root) == []


def test_one_baseline_for_every_tree_and_a_check_of_one_leaves_the_others_lines(tmp_path: Path) -> None:
    app = plant(tmp_path, {"mod.py": function("long", 90)})
    benchmarks = plant(tmp_path, {"run.py": function("render", 85)}, name="benchmarks")
    baseline = tmp_path / "baseline.txt"
    listed = (
        "function-lines app/mod.py:long 90\n"
        "function-lines benchmarks/run.py:render 85  # split it\n"
        "module-cycle benchmarks.a -> benchmarks.b -> benchmarks.a\n"
        "package-cycle search -> store -> search\n"
    )
    baseline.write_text(listed)
    # benchmarks' lines are not app's: a check of app alone calls only app's stale line stale
    assert archcheck.check(app, baseline, tmp_path) == [
        "baseline.txt:4: `package-cycle search -> store -> search` no longer occurs: delete that line "
        "(archcheck.py --prune does)"
    ]
    assert archcheck.check([benchmarks], baseline, tmp_path) == [
        "baseline.txt:3: `module-cycle benchmarks.a -> benchmarks.b -> benchmarks.a` no longer occurs: "
        "delete that line (archcheck.py --prune does)"
    ]
    (benchmarks / "run.py").write_text(function("render", 80))
    assert archcheck.prune([benchmarks], baseline, tmp_path) == [
        "deleted line 2: function-lines benchmarks/run.py:render 85  # split it",
        "deleted line 3: module-cycle benchmarks.a -> benchmarks.b -> benchmarks.a",
    ]
    assert (
        baseline.read_text() == "function-lines app/mod.py:long 90\npackage-cycle search -> store -> search\n"
    )
    text = archcheck.baseline_text([app, benchmarks], tmp_path)
    assert text.splitlines()[-1] == "function-lines app/mod.py:long 90"


def test_the_command_checks_every_root_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = plant(tmp_path, {"a.py": ""})
    scripts = plant(tmp_path, {"tool.py": function("main", 81)}, name="scripts")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert archcheck.main(["archcheck", "--root", str(app), "--baseline", str(empty)]) == 0
    assert "archcheck: app/: no import cycle" in capsys.readouterr().out
    args = ["archcheck", "--root", str(app), "--root", str(scripts), "--baseline", str(empty)]
    assert archcheck.main(args) == 1
    assert "function scripts/tool.py:main has 81 lines" in capsys.readouterr().err
