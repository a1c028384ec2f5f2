"""The README and the routes tables stay true: every route documented, the first screen, CI's command."""

from __future__ import annotations

import re

from app.config import load_settings
from app.main import create_app
from tests.unit.docs_text import README, REPO, page, section

ROUTE_ROW = re.compile(r"^\| `([A-Z]+ /[^`]*)` \|", flags=re.M)


def test_every_route_of_the_app_is_in_the_routes_table() -> None:
    app = create_app(load_settings(_env_file=None))
    served = {f"{method.upper()} {path}" for path, ops in app.openapi()["paths"].items() for method in ops}
    documented = set(ROUTE_ROW.findall(page("routes.md")))
    v2_admin = set(ROUTE_ROW.findall(section(page("v2.md"), "Admin routes")))
    queue = set(ROUTE_ROW.findall(section(page("operations.md"), "Background jobs")))
    assert served == documented | v2_admin | queue
    assert RAG_API_ROUTES <= served  # rag_api v0.9's 11 routes, plus ours


RAG_API_ROUTES = {
    "GET /health",
    "POST /embed",
    "POST /embed-upload",
    "POST /local/embed",
    "POST /text",
    "POST /query",
    "POST /query_multiple",
    "GET /documents",
    "DELETE /documents",
    "GET /documents/{file_id}/context",
    "GET /ids",
}


def test_query_multiple_documents_its_404() -> None:
    row = next(line for line in page("routes.md").splitlines() if line.startswith("| `POST /query_multiple`"))
    assert "404" in row and "No documents found for the given query" in row


def test_readme_stays_inside_the_repository() -> None:
    # links from docs/ may climb to the README; the README itself never leaves the repository root
    assert "../" not in README.read_text(encoding="utf-8")


def test_first_screen_two_commands_and_what_they_need() -> None:
    first_screen = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    [block] = re.findall(r"```sh\n(.*?)```", first_screen, flags=re.S)
    assert [line.split()[0] for line in block.strip().splitlines()] == ["scripts/serve", "scripts/test"]
    assert "Python 3.11+" in first_screen and "Node ≥ 20 and npm" in first_screen


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "exec scripts/test\n" in ci
    test_script = (REPO / "scripts" / "test").read_text()
    assert "bash scripts/lint" in test_script  # ruff and mypy run with the tests
    lint = (REPO / "scripts" / "lint").read_text()
    assert ".venv/bin/mypy" in lint and ".venv/bin/ruff check" in lint


def test_the_readme_says_how_many_packages_a_first_start_installs() -> None:
    """The figures of the first screen, to the nearest ten, from the lock files scripts/serve and
    scripts/test install (some entries are for other platforms: about, not exactly)."""
    first_screen = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    said = re.search(r"installs about (\d+) Python\s+packages \(`scripts/test` about (\d+)\)", first_screen)
    assert said is not None, "the README's first screen no longer says how many packages it installs"
    entries = [
        len(re.findall(r"^[A-Za-z0-9]", (REPO / lock).read_text(), flags=re.M))
        for lock in ("requirements.lock", "requirements-test.lock")
    ]
    assert [int(said.group(1)), int(said.group(2))] == [round(n, -1) for n in entries]
