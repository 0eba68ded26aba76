"""Two learners' notebooks at once, under two keys, against one shared room server; and the
instructor's dashboard on a room's server.

Each notebook runs top to bottom in a real kernel (nbclient, as the headless runners do) with
``LABKIT_URL`` and its own ``LABKIT_API_KEY``; the room's server requires keys, so a request
that did not carry the learner's key would fail its notebook. The server's billing ledger then
shows both learners' responses, and nobody else's.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from openai import OpenAI

from labkit.analysis.room import label_of
from labkit.client import room
from labkit.client.launcher import LabkitServer

pytestmark = pytest.mark.slow  # notebooks in real kernels

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"
LEARNERS = {
    "sk-room-ada": "06_real_clients.ipynb",
    "sk-room-bo": "04_appended_rollout_prototype.ipynb",
}


def run_notebook(name: str, env: dict[str, str]) -> str:
    """Execute a notebook in a fresh kernel with ``env``; all its text output, tables included."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute(env=env)
    return "\n".join(
        output.get("text", "") or output.get("data", {}).get("text/plain", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def owner_of(key: str) -> str:
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:32]  # as the server names a key's owner


def test_two_notebooks_share_one_room_server_under_their_own_keys(tmp_path: Path) -> None:
    args = [a for key in LEARNERS for a in ("--api-key", key)] + ["--profile", "production-like"]
    with LabkitServer(args=args, db=tmp_path / "room.sqlite3") as server:
        root = server.base_url.removesuffix("/v1")
        envs = {key: {**os.environ, room.URL_ENV: root, room.KEY_ENV: key} for key in LEARNERS}
        with ThreadPoolExecutor(len(LEARNERS)) as pool:
            outputs = dict(
                zip(LEARNERS, pool.map(run_notebook, LEARNERS.values(), envs.values()), strict=True)
            )
        for text in outputs.values():
            assert f"using the room's server at {root}" in text, text[:2000]
        with sqlite3.connect(server.db) as db:
            billed = dict(db.execute("SELECT owner, COUNT(*) FROM billing GROUP BY owner").fetchall())
    assert set(billed) == {owner_of(key) for key in LEARNERS}, billed
    assert all(count >= 10 for count in billed.values()), billed  # whole rollouts, not a probe


def test_the_dashboard_on_a_rooms_server_with_one_design_says_what_it_waits_for() -> None:
    """The instructor's notebook joins the room (no simulated learners), while one learner, named
    Ada, sends plain SDK responses (the server's default HTTP design, sprint): the comparison
    waits for a second design instead of comparing sprint with itself, and no key is shown."""
    teacher, ada = "sk-room-teacher", "sk-room-ada"
    with LabkitServer(args=["--api-key", ada, "--instructor-key", teacher, "--profile", "local"]) as server:
        stop = threading.Event()

        def ada_works() -> None:
            with OpenAI(base_url=server.base_url, api_key=ada, max_retries=0) as client:
                for _ in range(1200):  # bounded: at most a couple of minutes, until the notebook ends
                    if stop.is_set():
                        return
                    client.responses.create(
                        model="labkit-spark", input="Hi.", metadata={"labkit_name": "Ada"}
                    )
                    time.sleep(0.1)

        learner = threading.Thread(target=ada_works)
        learner.start()
        try:
            env = {**os.environ, room.URL_ENV: server.base_url.removesuffix("/v1"), room.KEY_ENV: teacher}
            text = run_notebook("07_instructor_dashboard.ipynb", env)
        finally:
            stop.set()
            learner.join(timeout=30)
    assert "using the room's server" in text, text[:2000]
    assert "Only sprint so far" in text and "a second design" in text, text
    assert "as long for its first token" not in text  # no design compared with itself
    assert re.search(rf"{label_of(ada)}\s+Ada\s", text), text  # the learner's label, and her name
    assert ada not in text and teacher not in text
