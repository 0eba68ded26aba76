"""Shared fixtures: a real ``labkit serve`` subprocess on loopback, and official SDK clients."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from openai import OpenAI

from labkit.client.launcher import LabkitServer

API_KEY = "sk-labkit-test"


@pytest.fixture(scope="session")
def server() -> Iterator[LabkitServer]:
    """One server for the whole session (each test makes its own conversations)."""
    with LabkitServer() as srv:
        yield srv


@pytest.fixture
def client(server: LabkitServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as c:
        yield c


def auth_headers(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


READ_FILE_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file of the repository.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}


# The event order of docs/protocol.md §2, with each run of deltas written once.
TEXT_TURN_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
CALL_TURN_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


def collapse_deltas(types: list[str]) -> list[str]:
    """Event types with each run of deltas folded into one (chunking follows the decode clock).

    >>> collapse_deltas(["a", "x.delta", "x.delta", "b"])
    ['a', 'x.delta', 'b']
    """
    out: list[str] = []
    for kind in types:
        if not (out and kind == out[-1] and kind.endswith(".delta")):
            out.append(kind)
    return out


def server_spans(base_url: str, response_id: str, key: str = API_KEY) -> list[dict]:
    """The server's spans for one response (``GET /v1/labkit/traces``), in the order they ran."""
    reply = httpx.get(
        f"{base_url}/labkit/traces",
        params={"response_id": response_id},
        headers=auth_headers(key),
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["data"]


def two_http_turns(
    base_url: str, model: str = "labkit-spark", **headers: str
) -> tuple[list[dict], list[dict]]:
    """A stateless conversation of two turns (a fresh prefix, so no cache knows it); each turn's spans."""
    instructions = f"Session {uuid.uuid4().hex}. Be brief. " + "Read before you write. " * 20
    history: list[dict] = [{"role": "user", "content": "Say hello."}]
    spans = []
    with httpx.Client(timeout=30, headers={**auth_headers(), **headers}) as http:
        for _ in range(2):
            body = {"model": model, "instructions": instructions, "input": history, "store": False}
            reply = http.post(f"{base_url}/responses", json=body)
            assert reply.status_code == 200, reply.text
            response = reply.json()
            spans.append(server_spans(base_url, response["id"]))
            history = [*history, *response["output"], {"role": "user", "content": "More."}]
    return spans[0], spans[1]


def by_stage(spans: list[dict]) -> dict[str, dict]:
    """Spans keyed by stage, for responses where each stage runs once."""
    found = {span["stage"]: span for span in spans}
    assert len(found) == len(spans), f"a stage ran twice: {[s['stage'] for s in spans]}"
    return found


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that this test holds, listening, for its whole duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def socket_inodes(pid: int) -> set[str]:
    """The sockets process ``pid`` holds open, by inode (from /proc: Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    return inodes


@contextmanager
def served_in_thread(app: Any, **config: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread of this process, on a loopback socket; yields its
    URL (``http://127.0.0.1:PORT/``). ``config``: more ``uvicorn.Config`` settings."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
