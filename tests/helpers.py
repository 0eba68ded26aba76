"""What the tests share besides fixtures: the test key, tools and event lists, raw-wire helpers,
the room's limits and its error checks, the ledger's polling, the command line as a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import uvicorn
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from labkit.paths import default_data_dir

API_KEY = "sk-labkit-test"
REPO = Path(__file__).resolve().parents[1]


def auth_headers(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def path_tool(name: str, description: str) -> dict[str, Any]:
    """A strict function tool that takes one argument, a path."""
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        "strict": True,
    }


READ_FILE_TOOL = path_tool("read_file", "Read a file of the repository.")


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


# A conversation of five input items of every shape a message takes.
FIVE_ITEMS = [
    {"role": "developer", "content": "You are terse."},
    {"role": "user", "content": "one"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "two", "annotations": []}]},
    {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
    {"type": "message", "role": "user", "content": "four"},
]


# ---------------------------------------------------------------- WebSocket mode, raw


def ws_connect(
    server: LabkitServer, query: str = "", *, max_queue: int | None = 16, **headers: str
) -> ClientConnection:
    """A raw WebSocket to ``server``. ``max_queue=None`` keeps reading what the server sends while
    the test is busy sending: with websockets' default (16 messages) a client that sends for a
    long time without reading stops reading, and the server then stops reading it too."""
    return connect(
        server.ws_url + query,
        additional_headers={**auth_headers(), **headers},
        open_timeout=10,
        max_size=None,
        max_queue=max_queue,
    )


def ws_turn(ws: ClientConnection, model: str = "labkit-spark", **body: Any) -> dict[str, Any]:
    """One ``response.create`` on a raw socket; the terminal event's response."""
    ws.send(json.dumps({"type": "response.create", "model": model, **body}))
    while True:
        event = json.loads(ws.recv(timeout=30))
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return event["response"]
        assert event["type"] != "error", event


# ---------------------------------------------------------------- profiles and the billing ledger

POLL_S = 10.0  # the longest any test waits for an overlapped ledger write


def profile_with(tmp: Path, name: str, **sections: dict[str, float]) -> Path:
    """The local profile with some fields changed, written as ``tmp/name.toml``."""
    text = (default_data_dir() / "profiles" / "local.toml").read_text()
    for section, values in sections.items():
        for key, value in values.items():
            head = f"[{section}]\n{key} = "
            start = text.index(head) + len(head)
            end = text.index("\n", start)
            text = text[:start] + str(value) + text[end:]
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def ledger_rows(db: Path, response_id: str) -> list[tuple[Any, ...]]:
    """The ledger rows of one response: (status, input_tokens, cached_tokens, output_tokens)."""
    with sqlite3.connect(db) as conn:
        query = "SELECT status, input_tokens, cached_tokens, output_tokens FROM billing WHERE response_id = ?"
        return conn.execute(query, (response_id,)).fetchall()


def wait_for_rows(db: Path, response_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Poll until every response has a ledger row (bounded), then return the rows."""
    deadline = time.monotonic() + POLL_S
    while True:
        rows = {rid: ledger_rows(db, rid) for rid in response_ids}
        if all(rows.values()) or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


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


# ---------------------------------------------------------------- a room of buggy clients

# A server set up for a room: two keys and small limits, so each limit is reached in a few requests.
KEY_A, KEY_B = "sk-room-a", "sk-room-b"
MAX_BODY = 65_536
MAX_OUTPUT = 64
MAX_TRACES = 3
ROOM_ARGS = [
    "--profile",
    "local",
    "--api-key",
    KEY_A,
    "--api-key",
    KEY_B,
    "--max-body-bytes",
    str(MAX_BODY),
    "--max-frame-bytes",
    str(MAX_BODY),
    "--max-output-tokens",
    str(MAX_OUTPUT),
    "--max-queued-creates",
    "2",
    "--max-traces",
    str(MAX_TRACES),
]
ERROR_KEYS = {"message", "type", "param", "code"}
# What a leaked traceback or server path looks like in a message.
LEAK = re.compile(r"Traceback|File \"|/site-packages/|labkit/server/|\.py\", line")
TERMINAL = {"response.completed", "response.incomplete"}  # how a room's answers end (none fails)
RECV_TIMEOUT = 30.0  # a safety net against a hung test, not a measurement


def bearer(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def root_of(server: LabkitServer) -> str:
    return server.base_url.removesuffix("/v1")


def assert_serving(server: LabkitServer, http: httpx.Client | None = None) -> None:
    """``/healthz`` answers and a normal response completes (on ``http``'s connection, if given)."""
    client = http or httpx.Client(timeout=30)
    try:
        health = client.get(f"{root_of(server)}/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        body = {"model": "labkit-spark", "input": "Still there?", "store": False}
        reply = client.post(f"{server.base_url}/responses", json=body, headers=bearer())
        assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text[:300]
    finally:
        if http is None:
            client.close()


def strict_json(text: str) -> Any:
    """JSON as the RFC has it: no NaN or Infinity.

    >>> strict_json('{"n": 1e300}')
    {'n': 1e+300}
    """

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} on the wire")

    return json.loads(text, parse_constant=refuse)


def assert_api_error(reply: httpx.Response, status: int | None = None) -> dict[str, Any]:
    """A 4xx with the HTTP error body of docs/protocol.md §5, and a message that leaks nothing
    of the server."""
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text[:300])
    if status is not None:
        assert reply.status_code == status, reply.text[:300]
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert not LEAK.search(error["message"]), error["message"]
    return error


def recv(ws: ClientConnection) -> dict[str, Any]:
    """The next WebSocket event, parsed strictly (``strict_json``)."""
    raw = ws.recv(timeout=RECV_TIMEOUT)
    assert isinstance(raw, str)
    event = strict_json(raw)
    assert isinstance(event, dict) and isinstance(event.get("type"), str), raw
    return event


def assert_error_event(event: dict[str, Any], status: int = 400) -> dict[str, Any]:
    """The nested WebSocket error shape, with a message that leaks nothing of the server."""
    assert event["type"] == "error", event
    assert event["status"] == status, event
    assert set(event["error"]) - {"headers"} == ERROR_KEYS  # a rate limit's headers may come too
    assert isinstance(event["error"]["code"], str)
    assert not LEAK.search(event["error"]["message"]), event
    return event["error"]


# ---------------------------------------------------------------- several workers, read off /proc


def port_of(server: LabkitServer) -> int:
    return int(server.base_url.rsplit(":", 1)[1].split("/")[0])


def worker_holding(server: LabkitServer, client_port: int) -> int:
    """The worker whose socket is the server's end of the connection from ``client_port``."""
    port = port_of(server)
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client_port:
            holders = [pid for pid in server.processes()[1:] if inode in socket_inodes(pid)]
            assert len(holders) == 1, holders
            return holders[0]
    raise AssertionError(f"no connection from port {client_port}")


# ---------------------------------------------------------------- the room benchmark


def load_script(path: str) -> ModuleType:
    """A script of the repository (``benchmarks/room_load.py``, ``tools/reading_time.py``), imported
    for a test: it is not part of the package."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPO / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def room_load() -> ModuleType:
    """``benchmarks/room_load.py``, imported."""
    return load_script("benchmarks/room_load.py")


# ---------------------------------------------------------------- the command line

CLI_TIMEOUT_S = 30


def labkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A stray $LABKIT_MODELS or $LABKIT_DATA in the caller's shell must not change the outcome.
    base = {k: v for k, v in os.environ.items() if k not in ("LABKIT_MODELS", "LABKIT_DATA")}
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env={**base, **(env or {})},
    )


def one_line_error(result: subprocess.CompletedProcess[str], *facts: str) -> str:
    """The stderr line of a failed run, checked: non-zero exit, no traceback, one line, the facts."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.stderr
    for fact in facts:
        assert fact in lines[0], (fact, lines[0])
    return lines[0]
