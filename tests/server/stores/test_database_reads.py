"""Reads of what is stored are never held up by a write waiting for the lock.

In WAL mode a reader does not wait for a writer, yet a read used to queue on the one thread of
the store's connection behind a write that waited for a lock another process held: a GET of a
stored response took as long as that write's wait. Reads now have a connection and a thread of
their own (``Database.read``).

Another connection (a second process, or a sqlite3 connection of the test's) holds the file's
write lock (``BEGIN IMMEDIATE``) while a write waits for it. What is asserted is the order of
outcomes, never the clock: every read is answered while the write still waits, and the write
still ends as it did (a 503 past its wait, or stored once the lock is gone).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from labkit.server.stores.database import Database
from labkit.server.stores.store import ResponseStore
from tests.helpers import auth_headers
from tests.server.stores.test_database import MODEL, StoredOverWebSocket, create, lock_held

OWNER = "sk-owner"
WAIT_S = 30.0  # the write's wait for the lock in the in-process case: far past the reads


def response(rid: str, text: str) -> dict:
    return {"id": rid, "created_at": 1, "object": "response", "output_text": text}


def item(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_the_store_reads_while_its_write_waits_for_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"

    async def scenario() -> None:
        database = Database(path, busy_timeout_s=WAIT_S)
        store = ResponseStore(database)
        await store.save(OWNER, response("resp_1", "first"), [item("one")], [item("two")], parent=None)
        await store.save(OWNER, response("resp_2", "second"), [item("three")], [], parent="resp_1")
        waiting = threading.Event()
        database.conn.set_trace_callback(lambda sql: sql == "BEGIN IMMEDIATE" and waiting.set())
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        try:
            saving = asyncio.create_task(
                store.save(OWNER, response("resp_3", "third"), [item("four")], [], parent="resp_2")
            )
            assert await asyncio.to_thread(waiting.wait, WAIT_S)  # the save waits for the lock now
            # The old store read on the save's thread: each of these waited for the save to end.
            assert (await store.get(OWNER, "resp_2"))["output_text"] == "second"
            assert await store.has(OWNER, "resp_1")
            assert await store.items("resp_1", "input") == [item("one")]
            history = await store.conversation(OWNER, "resp_2")
            assert history == [item("one"), item("two"), item("three")]
            assert not saving.done()  # all read while the save still waited
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await saving  # the lock is gone: the write goes through
        assert await store.conversation(OWNER, "resp_3") == [item(t) for t in ("one", "two", "three", "four")]
        database.close()

    asyncio.run(scenario())


@pytest.mark.slow  # a server of its own, and a write's whole wait for the lock
def test_stored_responses_are_read_over_http_while_a_write_waits_for_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "room.sqlite3"
    with (
        LabkitServer(db=db, args=["--profile", "local"]) as server,
        httpx.Client(base_url=server.base_url, headers=auth_headers(), timeout=30) as http,
    ):
        first = create(server, store=True).json()
        stored = http.post("/responses", json={**body("Go on."), "previous_response_id": first["id"]}).json()
        order: list[str] = []
        with lock_held(db):
            waiting = StoredOverWebSocket(server, order)
            try:
                assert waiting.decoded.wait(30)  # its answer is decoded: the server now stores it
                got = http.get(f"/responses/{stored['id']}")
                order.append("get")
                items = http.get(f"/responses/{stored['id']}/input_items")
                order.append("input_items")
                again = {**body("Once more."), "store": False, "previous_response_id": stored["id"]}
                follow_up = http.post("/responses", json=again)
                order.append("follow-up")
            finally:
                waiting.close()
            refused = create(server, store=True)  # a write, still locked out
        # The old server read behind the waiting write: "stored" came before every read.
        assert order == ["get", "input_items", "follow-up", "stored"], order
        assert got.status_code == 200 and got.json()["id"] == stored["id"], got.text
        assert items.status_code == 200 and items.json()["data"], items.text
        assert follow_up.status_code == 200 and follow_up.json()["status"] == "completed", follow_up.text
        # Hydrated from the store: the follow-up's prompt holds the whole stored conversation.
        alone = http.post("/responses", json={**body("Once more."), "store": False}).json()
        assert follow_up.json()["usage"]["input_tokens"] > alone["usage"]["input_tokens"]
        assert waiting.last["response"]["error"]["code"] == "database_unavailable", waiting.last
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "database_unavailable"


def body(text: str) -> dict:
    return {"model": MODEL, "input": text, "store": True}
