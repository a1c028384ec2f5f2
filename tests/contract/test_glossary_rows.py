"""A glossary row is context, never `/query_v2`'s first evidence on its own
(app/evidence/query/context_rows.py): through the running service, with the offline model."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.config import Settings
from tests.contract.helpers import agent_id
from tests.contract.test_query_v2 import ADMIN, ask_v2, upload_staged, v2_tuning
from tests.fixtures.service import running_app

pytestmark = pytest.mark.slow

USER = "user-glossary"
MANUAL = """# Sketch Studio user guide

## Glossary

| Term | Meaning |
| --- | --- |
| Open | Begin using a file |
| Save | Keep your changes |
| Project | A set of drawings |
| Layer | One sheet of a drawing |
| Export | Write a copy in another format |

## Working with projects

To continue with earlier work, go to the start screen and choose Recent. Pick the project in the
list and press Enter; the last view of every drawing comes back as you left it. A project that was
moved to another folder is found with Browse, which lists every project folder on the computer.

## Printing

Print a drawing with File and Print. Choose the paper size and the margins before you confirm.
"""
QUESTION = "I want to open the project I worked on yesterday"


async def test_a_glossary_row_that_matched_a_question_word_is_second_behind_the_passage(
    settings_factory: Callable[..., Settings],
) -> None:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    assert settings.v2.rerank.glossary_row_words == 12  # the shipped default
    async with running_app(settings) as client:
        fid = await upload_staged(client, agent, "guide.md", MANUAL, USER, prefix="guide")

        async def ask(question: str) -> list[dict[str, object]]:
            return await ask_v2(client, agent, [fid], question, USER)

        with v2_tuning(client, "rerank", glossary_row_words=0):
            without = await ask(QUESTION)
        served = await ask(QUESTION)
        # the table kept whole (a chunk of its own) is passed over for the passage
        drawings = await ask("How can I open my drawings again?")
        # nothing else holds what is asked beside the term: the row stays first
        save = await ask("how do I save my changes before closing?")
        # a question about the term itself keeps its row first
        term = await ask("Open?")

    def kinds(results: list[dict[str, object]]) -> list[object]:
        return [r["chunk_kind"] for r in results]

    # without the rule the row labelled "Open" wins on the question's word "open"
    assert kinds(without)[0] == "table_row" and "Begin using a file" in str(without[0]["content"])
    # with it the passage that explains the task comes first and the row is still shown, second
    assert kinds(served)[0] == "prose" and "choose Recent" in str(served[0]["content"])
    assert kinds(served)[1] == "table_row" and served[1]["content"] == without[0]["content"]
    assert kinds(drawings)[0] == "prose" and "choose Recent" in str(drawings[0]["content"])
    assert kinds(save)[0] == "table_row" and "Keep your changes" in str(save[0]["content"])
    assert kinds(term)[0] == "table_row" and "Begin using a file" in str(term[0]["content"])
