"""The response store: stored responses and their items in SQLite (WAL).

Only ``store=true`` responses are written. Each response keeps its own input
items and output items; a conversation is rebuilt by walking the
``previous_response_id`` chain, which is the history hydration an HTTP
follow-up pays for on every turn.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from labkit.server.stores.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    parent_id TEXT,  -- the stored response whose conversation this one continues
    created_at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('input', 'output')),
    position INTEGER NOT NULL,
    item_id TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (response_id, role, position)
);
CREATE INDEX IF NOT EXISTS items_by_id ON items(item_id);
"""

# Deep enough for any agent rollout; stops a cyclic or runaway chain.
MAX_CHAIN = 10_000


class ResponseStore:
    """Every method runs its statements beside the event loop: writes on the database's own
    thread (``Database.run``), reads on its read connection's (``Database.read``), so a read of
    what is stored never waits behind a write waiting for the lock. A file locked elsewhere, or a
    full disk, is a 503 (``DatabaseUnavailable``) for the write that needs it (for a read only if
    the file cannot be read), and nobody else waits for it."""

    def __init__(self, database: Database) -> None:
        self._db = database
        with database.lock:
            database.conn.executescript(SCHEMA)

    async def save(
        self,
        owner: str,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        output_items: list[dict[str, Any]],
        *,
        parent: str | None,
    ) -> None:
        """Store a response with its items; ``parent`` is the stored response its history continues."""
        head = (response["id"], owner, parent, response["created_at"], json.dumps(response))
        rows = [
            (response["id"], role, pos, item.get("id"), json.dumps(item))
            for role, items in (("input", input_items), ("output", output_items))
            for pos, item in enumerate(items)
        ]

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")  # the write lock now: a busy file waits here, not mid-way
            try:
                conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)", head)
                conn.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._db.run(write)

    async def get(self, owner: str, response_id: str) -> dict[str, Any] | None:
        query = "SELECT body FROM responses WHERE id = ? AND owner = ?"
        row = await self._db.read(lambda conn: conn.execute(query, (response_id, owner)).fetchone())
        return json.loads(row[0]) if row else None

    async def has(self, owner: str, response_id: str) -> bool:
        query = "SELECT 1 FROM responses WHERE id = ? AND owner = ?"
        row = await self._db.read(lambda conn: conn.execute(query, (response_id, owner)).fetchone())
        return row is not None

    async def delete(self, owner: str, response_id: str) -> bool:
        query = "DELETE FROM responses WHERE id = ? AND owner = ?"
        return await self._db.run(lambda conn: conn.execute(query, (response_id, owner)).rowcount > 0)

    async def items(self, response_id: str, role: str) -> list[dict[str, Any]]:
        return await self._db.read(lambda conn: _items(conn, response_id, role))

    async def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """Every item of the chain ending at ``response_id``, oldest first; None if not found."""
        return await self._db.read(lambda conn: _conversation(conn, owner, response_id))

    async def find_item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """The most recent stored item with this id, among the owner's responses."""
        query = (
            "SELECT i.body FROM items i JOIN responses r ON r.id = i.response_id "
            "WHERE i.item_id = ? AND r.owner = ? ORDER BY r.created_at DESC LIMIT 1"
        )
        row = await self._db.read(lambda conn: conn.execute(query, (item_id, owner)).fetchone())
        return json.loads(row[0]) if row else None


def _items(conn: sqlite3.Connection, response_id: str, role: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT body FROM items WHERE response_id = ? AND role = ? ORDER BY position", (response_id, role)
    ).fetchall()
    return [json.loads(body) for (body,) in rows]


def _conversation(conn: sqlite3.Connection, owner: str, response_id: str) -> list[dict[str, Any]] | None:
    chain: list[str] = []
    current: str | None = response_id
    while current is not None and len(chain) < MAX_CHAIN:
        row = conn.execute(
            "SELECT parent_id FROM responses WHERE id = ? AND owner = ?", (current, owner)
        ).fetchone()
        if row is None:
            if not chain:
                return None
            break  # an ancestor was deleted: the history starts after it
        chain.append(current)
        current = row[0]
    items: list[dict[str, Any]] = []
    for rid in reversed(chain):
        items += _items(conn, rid, "input") + _items(conn, rid, "output")
    return items
