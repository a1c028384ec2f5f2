"""`scripts/bench --ab REF`: the option, the alternation of requests, the lock comparison, the
worktree's lifetime and the side-by-side table (no service, no database)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ab
from benchmarks.__main__ import parse
from benchmarks.workload import Reply, Scenario


class RecordingClient:
    """Answers every POST at once and writes down who was asked, in order."""

    def __init__(self, label: str, log: list[tuple[str, str]]) -> None:
        self.label = label
        self.log = log

    async def post(self, path: str, body: dict[str, Any], user: str) -> Reply:
        self.log.append((self.label, body["query"]))
        return Reply(200, 1.0 if self.label == "A" else 0.5, {"embed": 0.1, "db": 0.4}, b"[]")


def test_the_option_selects_the_ab_run() -> None:
    opts = parse(["--ab", "main", "--files", "10", "--chunks", "100", "--ab-v2"])
    assert opts.ab == "main" and opts.ab_v2 is True
    assert parse(["--files", "10", "--chunks", "100"]).ab is None


async def test_requests_alternate_a_b_with_the_same_query_and_warmups_are_dropped() -> None:
    log: list[tuple[str, str]] = []
    clients: Any = (RecordingClient("A", log), RecordingClient("B", log))
    bodies = [{"query": f"q{i}"} for i in range(4)]
    a, b = await ab.alternate(clients, "/query_multiple", bodies, "user", warmup=2)
    assert [who for who, _ in log] == ["A", "B"] * 6
    assert log[:4] == [("A", "q0"), ("B", "q0"), ("A", "q1"), ("B", "q1")]  # the warm-up pairs
    assert [q for who, q in log[4:] if who == "A"] == ["q0", "q1", "q2", "q3"]
    assert len(a.replies) == len(b.replies) == 4
    assert a.summary()["client_ms"]["p50"] == 1.0 and b.summary()["client_ms"]["p50"] == 0.5


def test_the_table_puts_a_and_b_side_by_side_with_the_ratio() -> None:
    sides = (
        ab.Checkout("A", "main (abc)", Path("/ref"), "python"),
        ab.Checkout("B", "this checkout", Path("/here"), "python"),
    )
    a, b = ab.SideResult(), ab.SideResult()
    a.replies = [Reply(200, 2.0, {"embed": 1.0, "db": 0.6}, b"[]")] * 3
    b.replies = [Reply(200, 1.0, {"embed": 0.01, "db": 0.6}, b"[]")] * 3
    rows = [
        {"name": "query_multiple own-1", "files": 1, "A": a.summary(), "B": b.summary()},
        {"name": "query_v2 own-1", "files": 1, "skipped": "A answers 404"},
    ]
    table = ab.render(rows, sides).splitlines()
    assert table[0].startswith("A = main (abc)   B = this checkout")
    (row,) = [line for line in table if line.startswith("| query_multiple own-1 ")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["query_multiple own-1", "1", "2.00", "1.00", "0.50x"]
    assert cells[7:10] == ["1.00", "0.01", "0.01x"]
    # what is not the search: client time minus embed, pool and db (2.0 - 1.6, 1.0 - 0.61)
    assert cells[13:16] == ["0.40 / 0.40", "0.39 / 0.39", "0.97x"]
    assert any(line.startswith("| query_v2 own-1 | 1 | n/a: A answers 404") for line in table)
    assert ab.ratio(None, 1.0) == "-" and ab.ratio(0.0, 1.0) == "-"


def test_a_ref_shares_this_venv_only_when_every_lock_file_is_equal(tmp_path: Path) -> None:
    here, other = tmp_path / "here", tmp_path / "other"
    for folder in (here, other):
        folder.mkdir()
        for name in ab.LOCK_FILES:
            (folder / name).write_text(f"{name} pins\n")
    assert ab.same_locks(other, here)
    (other / "requirements.lock").write_text("another pin\n")
    assert not ab.same_locks(other, here)
    (other / "requirements.lock").unlink()
    assert not ab.same_locks(other, here)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def test_the_worktree_exists_inside_the_block_and_is_gone_after_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("one\n")
    _git(repo, "add", "f.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "one")
    monkeypatch.setattr(ab, "REPO_ROOT", repo)
    commit = ab.resolve_ref("HEAD")
    folder = tmp_path / "scratch" / "ref"
    with pytest.raises(RuntimeError), ab.ref_worktree(commit, folder) as tree:
        assert (tree / "f.txt").read_text() == "one\n"
        assert str(folder) in _git(repo, "worktree", "list")
        raise RuntimeError("the run failed")
    assert not folder.exists()
    assert str(folder) not in _git(repo, "worktree", "list")


def test_scenarios_are_nested_prefixes_of_namespace_a() -> None:
    from benchmarks import corpus as cp

    layout = cp.make_layout(cp.CorpusSpec(400, 40, 4, 2, 1))
    rows = ab.ab_scenarios(layout, seed=1)
    assert [s.name for s in rows] == ["own-1", "own-100", "own-373", "own-1000"]
    assert all(isinstance(s, Scenario) and s.user == cp.NAMESPACE_A for s in rows)
    assert (
        rows[1].file_ids[:1] == rows[0].file_ids
        and rows[3].file_ids[: len(rows[2].file_ids)] == rows[2].file_ids
    )


async def test_a_degraded_v2_answer_leaves_the_row_out() -> None:
    class V2Client:
        def __init__(self, body: bytes) -> None:
            self.body = body

        async def post(self, path: str, body: dict[str, Any], user: str) -> Reply:
            return Reply(200, 1.0, {}, self.body)

    whole = b'{"route": "v2", "results": [], "degraded": false}'
    partial = b'{"route": "v2", "results": [], "degraded": true}'
    scenario = Scenario("own-1", 1, ["f"], "u", None, ["u"])
    both: Any = (V2Client(whole), V2Client(whole))
    assert await ab.probe_v2(both, scenario, "q") is None
    one: Any = (V2Client(partial), V2Client(whole))
    why = await ab.probe_v2(one, scenario, "q")
    assert why is not None and why.startswith("A answers degraded")
