"""The response store: stored responses and their items in SQLite, each owner's own.

In process against a store of its own: what is saved reads back for its owner only, a
conversation is rebuilt by walking the ``previous_response_id`` chain (oldest first, and from
after a deleted ancestor), and an item is found among its owner's responses. Over loopback: a
server restarted on the same file serves what it stored before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.server.stores.database import Database
from labkit.server.stores.store import ResponseStore
from tests.helpers import API_KEY, FIVE_ITEMS, READ_FILE_TOOL

MODEL = "labkit-spark"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResponseStore]:
    database = Database(tmp_path / "store.sqlite3")
    yield ResponseStore(database)
    database.close()


def message(text: str, item_id: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "user", "content": text}


async def save(store: ResponseStore, owner: str, rid: str, parent: str | None, at: int = 0) -> dict[str, Any]:
    """A response with one input item and one output item, named after it."""
    response = {"id": rid, "created_at": at, "object": "response"}
    inputs, outputs = [message(f"{rid} in", f"msg_{rid}_in")], [message(f"{rid} out", f"msg_{rid}_out")]
    await store.save(owner, response, inputs, outputs, parent=parent)
    return response


# ---------------------------------------------------------------- the store, in process


def test_a_response_is_its_owners_only(store: ResponseStore) -> None:
    async def scenario() -> None:
        response = await save(store, "key_a", "resp_1", None)
        assert await store.get("key_a", "resp_1") == response and await store.has("key_a", "resp_1")
        assert await store.get("key_b", "resp_1") is None and not await store.has("key_b", "resp_1")
        assert await store.conversation("key_b", "resp_1") is None
        assert await store.delete("key_b", "resp_1") is False and await store.has("key_a", "resp_1")
        assert await store.delete("key_a", "resp_1") is True and not await store.has("key_a", "resp_1")

    asyncio.run(scenario())


def test_a_conversation_is_the_chain_oldest_first(store: ResponseStore) -> None:
    async def scenario() -> None:
        await save(store, "key_a", "resp_1", None)
        await save(store, "key_a", "resp_2", "resp_1")
        await save(store, "key_a", "resp_3", "resp_2")
        texts = [item["content"] for item in await store.conversation("key_a", "resp_3") or []]
        assert texts == ["resp_1 in", "resp_1 out", "resp_2 in", "resp_2 out", "resp_3 in", "resp_3 out"]
        assert await store.conversation("key_a", "resp_unknown") is None

    asyncio.run(scenario())


def test_a_deleted_ancestor_starts_the_history_after_it(store: ResponseStore) -> None:
    async def scenario() -> None:
        await save(store, "key_a", "resp_1", None)
        await save(store, "key_a", "resp_2", "resp_1")
        await save(store, "key_a", "resp_3", "resp_2")
        await store.delete("key_a", "resp_2")
        texts = [item["content"] for item in await store.conversation("key_a", "resp_3") or []]
        assert texts == ["resp_3 in", "resp_3 out"]
        assert await store.items("resp_2", "input") == []  # its items went with it

    asyncio.run(scenario())


def test_an_item_is_found_among_its_owners_responses_most_recent_first(store: ResponseStore) -> None:
    async def scenario() -> None:
        await save(store, "key_a", "resp_1", None, at=1)
        again = message("again", "msg_resp_1_in")  # a later response holding an item of the same id
        await store.save("key_a", {"id": "resp_2", "created_at": 2}, [again], [], parent=None)
        assert await store.find_item("key_a", "msg_resp_1_in") == again
        assert await store.find_item("key_b", "msg_resp_1_in") is None
        assert await store.find_item("key_a", "msg_nowhere") is None

    asyncio.run(scenario())


# ---------------------------------------------------------------- over loopback


def test_persistence_across_restart(tmp_path: Path) -> None:
    srv = LabkitServer(db=tmp_path / "r.sqlite3")
    with srv:
        with OpenAI(base_url=srv.base_url, api_key=API_KEY, max_retries=0) as c:
            first = c.responses.create(model=MODEL, input=FIVE_ITEMS, tools=[READ_FILE_TOOL])
            ids = [i.id for i in c.responses.input_items.list(first.id, order="asc")]
        old_url = srv.base_url
        srv.restart()
        assert srv.base_url != old_url
        with OpenAI(base_url=srv.base_url, api_key=API_KEY, max_retries=0) as c:
            assert c.responses.retrieve(first.id).model_dump() == first.model_dump()
            assert [i.id for i in c.responses.input_items.list(first.id, order="asc")] == ids
            call = first.output[0]
            second = c.responses.create(
                model=MODEL,
                previous_response_id=first.id,
                tools=[READ_FILE_TOOL],
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "ok"}],
            )
            assert second.status == "completed"
            assert second.previous_response_id == first.id
            assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
            # the item store survived too: references resolve
            ref = c.responses.create(model=MODEL, input=[{"type": "item_reference", "id": call.id}])
            assert ref.status == "completed"
    assert (tmp_path / "r.sqlite3").exists()
