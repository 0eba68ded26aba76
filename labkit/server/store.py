"""The response store: stored responses and their items in SQLite (WAL).

Only ``store=true`` responses are written. Each response keeps its own input
items and output items; a conversation is rebuilt by walking the
``previous_response_id`` chain, which is the history hydration an HTTP
follow-up pays for on every turn.
"""

from __future__ import annotations

import json
from typing import Any

from labkit.server.database import Database

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
    def __init__(self, database: Database) -> None:
        self._db, self._lock = database.conn, database.lock
        with self._lock:
            self._db.executescript(SCHEMA)

    def save(
        self,
        owner: str,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        output_items: list[dict[str, Any]],
        *,
        parent: str | None,
    ) -> None:
        """Store a response with its items; ``parent`` is the stored response its history continues."""
        rows = [
            (response["id"], role, pos, item.get("id"), json.dumps(item))
            for role, items in (("input", input_items), ("output", output_items))
            for pos, item in enumerate(items)
        ]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                    (
                        response["id"],
                        owner,
                        parent,
                        response["created_at"],
                        json.dumps(response),
                    ),
                )
                self._db.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def get(self, owner: str, response_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT body FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def has(self, owner: str, response_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
            ).fetchone()
        return row is not None

    def delete(self, owner: str, response_id: str) -> bool:
        with self._lock:
            cur = self._db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (response_id, owner))
        return cur.rowcount > 0

    def items(self, response_id: str, role: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM items WHERE response_id = ? AND role = ? ORDER BY position",
                (response_id, role),
            ).fetchall()
        return [json.loads(body) for (body,) in rows]

    def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """Every item of the chain ending at ``response_id``, oldest first; None if not found."""
        chain: list[str] = []
        current: str | None = response_id
        while current is not None and len(chain) < MAX_CHAIN:
            with self._lock:
                row = self._db.execute(
                    "SELECT parent_id FROM responses WHERE id = ? AND owner = ?",
                    (current, owner),
                ).fetchone()
            if row is None:
                if not chain:
                    return None
                break  # an ancestor was deleted: the history starts after it
            chain.append(current)
            current = row[0]
        items: list[dict[str, Any]] = []
        for rid in reversed(chain):
            items += self.items(rid, "input") + self.items(rid, "output")
        return items

    def find_item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """The most recent stored item with this id, among the owner's responses."""
        with self._lock:
            row = self._db.execute(
                "SELECT i.body FROM items i JOIN responses r ON r.id = i.response_id "
                "WHERE i.item_id = ? AND r.owner = ? ORDER BY r.created_at DESC LIMIT 1",
                (item_id, owner),
            ).fetchone()
        return json.loads(row[0]) if row else None
