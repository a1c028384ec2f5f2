"""A document named in a question selects the document, not its first chunks
(app/evidence/query/named_documents.py): through the running service, with the offline model."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.config import Settings
from tests.contract.helpers import agent_id, upload
from tests.contract.test_query_v2 import ADMIN, ask_v2, v2_tuning, wait_active
from tests.fixtures.service import auth, new_id, running_app

pytestmark = pytest.mark.slow

USER = "user-named-document"
TITLE = "Nightly Backup Server Guide"
GUIDE = f"""# {TITLE}

Version 2 of the guide for the people who run the nightly backup server of a small office. Read
it once before the first night the server runs, and keep it near the machine.

## Before you begin

The server needs a second disk at least as large as the disks it copies, a network cable and a
quiet place. Check that the office's computers are on the same network and that each of them has
a user account for the server. Write the account names down; the set-up asks for them.

## Installing the server

Unpack the server, connect the second disk and the network cable, and switch it on. Open the
set-up page from any computer of the office, choose the language and enter the account names you
wrote down. The set-up checks every computer once and shows which of them it can reach.

## Scheduling the copies

The nightly copy starts at two in the morning. Change the hour on the schedule page; the server
skips a night when a computer is switched off and copies it the next night it finds it running.
Keep at least thirty nights of copies when the disk allows it.

## Watching the disk

The status page shows how full the second disk is. When it reaches nine tenths, the server drops
the oldest nights first and sends a message to the office's address.

## Restoring a single file

To restore one file, open the archive list on the status page, pick the night the file was last
right, and choose the file in the folder view. Press Restore: the file comes back next to the
current one, with the night's date added to its name, so nothing is overwritten.
"""
NOTES = """# Desk notes

## Deleted mail

A deleted message stays in the mail program's bin for a week; drag it back to the inbox.

## Printer

The printer on the second floor takes A3 paper in its lower tray.
"""
QUESTION = f"With the {TITLE}, how do I bring back an older version of a file?"


async def test_a_question_naming_a_document_gets_the_section_that_answers_not_its_title_page(
    settings_factory: Callable[..., Settings],
) -> None:
    agent = agent_id()
    settings = settings_factory(v2_namespace_ids=[agent], admin_user_ids=[ADMIN])
    assert settings.v2.channels.named_document_chunks == 3  # the shipped default
    async with running_app(settings) as client:
        ids = []
        for name, text in (("backup-guide.md", GUIDE), ("notes.md", NOTES)):
            ids.append(new_id(name.split(".")[0]))
            r = await upload(client, ids[-1], name, text.encode(), auth(USER), entity_id=agent)
            assert r.status_code == 200, r.text
        await wait_active(client, agent, 2)

        with v2_tuning(client, "channels", named_document_chunks=0):
            without = await ask_v2(client, agent, ids, QUESTION, USER)
            copies_without = await ask_v2(client, agent, ids, f"{TITLE}: when do the copies run?", USER)
        served = await ask_v2(client, agent, ids, QUESTION, USER)
        copies = await ask_v2(client, agent, ids, f"{TITLE}: when do the copies run?", USER)
        # the name alone asks for the document: its opening comes first, as before
        name_only = await ask_v2(client, agent, ids, TITLE, USER)

    def first(results: list[dict[str, object]]) -> str:
        return str(results[0]["content"])

    # without the rule the title match stands for the guide's opening chunks, and one of them wins
    assert "Version 2 of the guide" in first(without)
    assert "Version 2 of the guide" in first(copies_without)
    # with it the match stands for the guide's chunks that hold the rest of the question
    assert "Press Restore" in first(served) and served[0]["file_id"] == ids[0]
    assert "starts at two in the morning" in first(copies)
    assert "Version 2 of the guide" in first(name_only)
