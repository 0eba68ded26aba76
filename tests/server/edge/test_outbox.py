"""A learner who never reads holds up only their own responses: not the engine, not the room.

A real server on loopback with the ``room`` profile at its defaults, keys required (4 replicas
of 32 engine slots; a key holds at most a quarter of a replica's, ``labkit.server.stages.slots``), and
raw sockets with a tiny receive buffer that complete the handshake, ask for long answers and
never read (``benchmarks/room_load.py``'s hostile learner: 8 sockets x 16 answers, as many as
the engine has slots). What is asserted is the mechanism: while they decode into their
buffers, another key's answers each take a slot at once on a replica where the hostile key
holds its whole share, and the hostile key's other responses wait for its share; the server
then cuts the sockets that never read (it closes them; each cut response's trace says why), and
its memory stays within its bound. How long the other learner's answer takes beside them, as a
ratio of its time alone, is ``benchmarks/room_load.py --hostile``'s to measure, not a test's.

The other cases run on a ``local`` server with a small ``--max-unread-bytes``, so each cut comes
in well under a second. Every wait is bounded: the module ends within a couple of minutes.

The memory bound: ``--max-unread-bytes`` of events a connection, plus the socket's own buffer
(64 KiB and one event) while it is being cut: for 8 sockets at the default about 9 MiB, checked
against a generous ``RSS_GROWTH_LIMIT_KB`` (the server also decodes their answers meanwhile).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from labkit.api.event_types import TERMINAL_EVENTS
from labkit.client.launcher import LabkitServer
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.server.edge.outbox import Outbox, SlowReader
from labkit.server.stages.slots import default_share
from tests.helpers import auth_headers, room_load, server_spans, socket_inodes

pytestmark = pytest.mark.slow  # a room's load and sockets cut for not reading

MODEL = "labkit-spark"
MAX_UNREAD = 64 * 1024  # labkit serve --max-unread-bytes, small: the cut comes in well under a second
SOCKETS, ANSWERS = 8, 16  # never-reading sockets of one key, long answers each (one lane each)
LONG = "Write 50000 tokens."
SHORT = "Write 100 tokens."  # the other learner's answer: about 0.1 s at the model's pace
SAMPLES = 5  # short answers beside the hostile sockets
LEARNER_KEY, SSE_KEY, SLOW_KEY = "sk-learner", "sk-sse-never-reads", "sk-reads-late"
ROOM = load_profile("room", default_data_dir()).engine
SHARE = default_share(ROOM.max_concurrent, keys_required=True)  # a key's slots on one replica, at most
CUT_DEADLINE_S = 60.0  # the old server never cut them: this is how long the test waits, at most
RECV_TIMEOUT_S = 10.0  # a safety net against a hung test, not a measurement
MAX_EVENTS = 100_000  # events read for one answer, at most
RSS_GROWTH_LIMIT_KB = 64 * 1024
TERMINAL = set(TERMINAL_EVENTS)


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local", "--max-unread-bytes", str(MAX_UNREAD)]) as running:
        yield running


@pytest.fixture(scope="module")
def room() -> Iterator[LabkitServer]:
    """The room profile at its defaults, with keys required (the learner's and the hostile one's)."""
    keys = ["--api-key", LEARNER_KEY, "--api-key", room_load().HOSTILE_KEY]
    with LabkitServer(args=["--profile", "room", *keys]) as running:
        yield running


def holds(pid: int, clients: list[socket.socket]) -> int:
    """How many of these clients' connections process ``pid`` (the server) still holds its end of.

    Its end is the loopback socket whose peer is the client's port; once the server has closed
    it the kernel may keep it a while to send what is left, but no process holds it.
    """
    ports = {sock.getsockname()[1] for sock in clients}
    inodes, held = socket_inodes(pid), 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        peer_port, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[9]
        held += peer_port in ports and inode in inodes
    return held


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def wait_until(
    done: Callable[[], bool], timeout_s: float, *, watch: Callable[[], None] = lambda: None
) -> bool:
    """Poll ``done`` every 50 ms (calling ``watch`` each time) for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        watch()
        if done():
            return True
        time.sleep(0.05)
    return done()


def answer(ws: ClientConnection, text: str, **fields: Any) -> dict[str, Any]:
    """One answer on a connection that reads: its terminal event."""
    ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": text, "store": False, **fields}))
    for _ in range(MAX_EVENTS):
        event = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        assert event["type"] != "error", event
        if event["type"] in TERMINAL:
            return event
    raise AssertionError(f"no terminal event in {MAX_EVENTS} events")


class Feed:
    """A key's trace stream (``/v1/labkit/traces/stream``), read in a thread until ``want`` events."""

    def __init__(self, server: LabkitServer, key: str, want: int) -> None:
        self.url, self.key, self.want = f"{server.base_url}/labkit/traces/stream", key, want
        self.events: list[dict[str, Any]] = []
        self.subscribed, self.done = threading.Event(), threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.subscribed.wait(10), "the trace stream did not open"

    def _read(self) -> None:
        try:
            headers = auth_headers(self.key)
            with httpx.stream("GET", self.url, headers=headers, timeout=CUT_DEADLINE_S) as reply:
                self.subscribed.set()  # the server subscribes before it answers
                for line in reply.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line[len("data: ") :]))
                        if len(self.events) >= self.want:
                            return
        except httpx.HTTPError:
            pass  # the server stopped: the events so far are all there is
        finally:
            self.subscribed.set()
            self.done.set()


def cut_stages(events: list[dict[str, Any]]) -> list[str]:
    """The stage each cut response was cut in (every event must be a cut, failed response)."""
    stages = []
    for event in events:
        assert event["status"] == "failed", event["status"]
        cut = [span for span in event["spans"] if "cut" in span["detail"]]
        assert len(cut) == 1 and cut[0]["detail"]["cut"].startswith("client too slow: "), cut
        stages.append(cut[0]["stage"])
    return stages


def queue_span(server: LabkitServer, response_id: str, key: str) -> dict[str, Any]:
    [span] = [s for s in server_spans(server.base_url, response_id, key) if s["stage"] == "queue"]
    return span


def test_a_learner_who_never_reads_takes_only_their_share_of_the_engine(room: LabkitServer) -> None:
    load = room_load()
    pid = room.processes()[0]
    feed = Feed(room, load.HOSTILE_KEY, want=SOCKETS * ANSWERS)
    with connect(room.ws_url, additional_headers=auth_headers(LEARNER_KEY), open_timeout=10) as learner:
        answer(learner, SHORT)  # warm: the tokenizer's cache, the replica's prefix cache, the pin
        rss_before = rss_kb(pid)
        peak = [rss_before]
        hostile = [
            load.never_reading_socket(room.base_url, model=MODEL, answers=ANSWERS, text=LONG)
            for _ in range(SOCKETS)
        ]
        try:
            assert holds(pid, hostile) == SOCKETS  # accepted, and served
            beside = [answer(learner, SHORT) for _ in range(SAMPLES)]  # theirs decode meanwhile, unread
            # The old server held every slot behind a blocked send, for good: this timed out.
            cut = wait_until(
                lambda: holds(pid, hostile) == 0, CUT_DEADLINE_S, watch=lambda: peak.append(rss_kb(pid))
            )
            assert cut, "the server still holds the sockets that never read"
        finally:
            for sock in hostile:
                sock.close()
    feed.done.wait(5)

    # The learner's answers each took a slot at once, on a replica where the hostile key held
    # its whole share then (the old server: every slot, so the learner waited for one).
    spans = [queue_span(room, event["response"]["id"], LEARNER_KEY) for event in beside]
    assert all(event["response"]["status"] == "completed" for event in beside)
    assert [span["detail"]["waited"] for span in spans] == [False] * SAMPLES, spans
    assert max(span["detail"]["busy"] for span in spans) >= SHARE, spans
    # The hostile key's responses were cut, each in the stage it was in. Those that waited for a
    # slot (most of them) waited for their key's share alone: each asked while its key held all of it.
    stages = cut_stages(list(feed.events))
    assert len(stages) >= SOCKETS and set(stages) <= {"queue", "prefill", "decode"}, stages
    asked = [s["detail"] for e in feed.events for s in e["spans"] if s["stage"] == "queue"]
    # A response cut while it waited has no verdict yet: it waited.
    waited = [detail["held_by_key"] for detail in asked if detail.get("waited", True)]
    assert len(waited) >= len(asked) // 2 and set(waited) == {SHARE}, asked
    assert max(peak) - rss_before < RSS_GROWTH_LIMIT_KB, (rss_before, max(peak))


def test_an_sse_stream_nobody_reads_is_cut_and_dropped(server: LabkitServer) -> None:
    pid = server.processes()[0]
    feed = Feed(server, SSE_KEY, want=1)
    body = json.dumps({"model": MODEL, "input": LONG, "stream": True, "store": True}).encode()
    url = httpx.URL(server.base_url)
    with small_socket(server) as sock:
        head = (
            f"POST /v1/responses HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
            f"Authorization: Bearer {SSE_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)  # and never a read
        assert wait_until(lambda: holds(pid, [sock]) == 1, RECV_TIMEOUT_S)
        assert wait_until(lambda: holds(pid, [sock]) == 0, CUT_DEADLINE_S), "never dropped"
    assert feed.done.wait(5), "no trace of the cut response"
    assert cut_stages(feed.events) == ["decode"]
    stored = httpx.get(
        f"{server.base_url}/responses/{feed.events[0]['response_id']}", headers=auth_headers(SSE_KEY)
    )
    assert stored.status_code == 404  # cut before its end: never stored


def test_an_sse_reader_that_comes_back_finds_response_failed_last(server: LabkitServer) -> None:
    """An SSE stream cut for its slow reader ends with ``response.failed``: the Response, failed
    with ``client_too_slow``, numbered after the last event the response produced."""
    key = "sk-sse-reads-late"
    feed = Feed(server, key, want=1)
    body = json.dumps({"model": MODEL, "input": LONG, "stream": True, "store": False}).encode()
    url = httpx.URL(server.base_url)
    with small_socket(server) as sock:
        head = (
            f"POST /v1/responses HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        assert feed.done.wait(CUT_DEADLINE_S), "never cut"  # meanwhile, nothing was read
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
    lines = received.split(b"\n")
    frames = [json.loads(line[len(b"data: ") :]) for line in lines if line.startswith(b"data: ")]
    last = frames[-1]
    assert last["type"] == "response.failed", last["type"]
    assert last["response"]["status"] == "failed" and last["response"]["error"]["code"] == "client_too_slow"
    assert last["response"]["id"] == feed.events[0]["response_id"]
    assert last["sequence_number"] > frames[-2]["sequence_number"], "numbered after what was produced"


def small_socket(server: LabkitServer) -> socket.socket:
    """A TCP connection to the server with a tiny receive buffer and small segments (see
    ``never_reading_socket``): what it does not read piles up in the server, not in kernels."""
    load, url = room_load(), httpx.URL(server.base_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, load.HOSTILE_RCVBUF)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, load.HOSTILE_MSS)
    sock.settimeout(10)
    sock.connect((url.host, url.port))
    return sock


def close_frame(sock: socket.socket) -> tuple[int, str]:
    """Read the server's frames (unmasked) up to its close frame: that frame's code and reason."""
    reader = sock.makefile("rb")
    for _ in range(MAX_EVENTS):
        head = reader.read(2)
        assert len(head) == 2, "the connection ended without a close frame"
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size >= 126:
            size = int.from_bytes(reader.read(2 if size == 126 else 8), "big")
        payload = reader.read(size)
        if opcode == 0x8:
            return int.from_bytes(payload[:2], "big"), payload[2:].decode()
    raise AssertionError(f"no close frame in {MAX_EVENTS} frames")


def test_a_slow_reader_is_told_why_it_was_cut(server: LabkitServer) -> None:
    """A client that stops reading, is cut, then reads again: what was sent, then close 1008."""
    feed = Feed(server, SLOW_KEY, want=1)
    with room_load().never_reading_socket(server.base_url, key=SLOW_KEY, answers=1, text=LONG) as sock:
        assert feed.done.wait(CUT_DEADLINE_S), "never cut"  # meanwhile, nothing was read
        code, reason = close_frame(sock)
    assert code == 1008 and reason.startswith("client too slow: "), (code, reason)
    assert cut_stages(feed.events) == ["decode"]


def test_a_reader_that_keeps_up_is_never_cut(server: LabkitServer) -> None:
    """Eight lanes at once, several times the bound in all: read as they come, none is cut."""
    lanes, received = 8, 0
    with connect(server.ws_url, additional_headers=auth_headers(LEARNER_KEY), open_timeout=10) as ws:
        for lane in range(lanes):
            create = {"type": "response.create", "model": "labkit-classic", "input": "Write 130 tokens."}
            ws.send(json.dumps({**create, "store": False, "stream_id": f"lane-{lane}"}))
        finished: list[dict[str, Any]] = []
        for _ in range(MAX_EVENTS):
            frame = ws.recv(timeout=RECV_TIMEOUT_S)
            received += len(frame)
            event = json.loads(frame)
            assert event["type"] != "error", event
            if event["type"] in TERMINAL:
                finished.append(event)
                if len(finished) == lanes:
                    break
    assert [event["response"]["status"] for event in finished] == ["completed"] * lanes
    assert received > 2 * MAX_UNREAD  # the bound is on what is unread, not on what is sent


def test_an_outbox_counts_a_frame_unread_until_the_socket_has_taken_it() -> None:
    """A frame handed to the writer is unread until the writer asks for the next one (the send
    has returned by then); one byte past the limit overflows, once, and ends both sides."""
    overflowed: list[SlowReader] = []
    box: Outbox[str] = Outbox(limit=10, on_overflow=overflowed.append)

    async def scenario() -> None:
        box.put("12345")
        assert await anext(box) == "12345" and box.unread == 5  # being written: still unread
        box.put("123")
        assert await anext(box) == "123" and box.unread == 3  # the first was written
        box.put("1234567")  # 10: at the limit, not past it
        with pytest.raises(SlowReader, match="11 bytes unread"):
            box.put("x")
        with pytest.raises(SlowReader):
            box.put("y")  # and every later frame
        with pytest.raises(SlowReader):
            await anext(box)  # the writer stops: what was queued is dropped

    asyncio.run(scenario())
    assert [slow.reason for slow in overflowed] == ["client too slow: 11 bytes unread (limit 10)"]
