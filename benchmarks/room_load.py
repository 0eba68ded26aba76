"""A workshop room on one server: N learners at once, each on a WebSocket connection of their own.

Starts ``labkit serve --profile PROFILE --workers W`` on loopback with a temporary database and
runs the default agent rollout (labkit's default scenario and model, or ``--scenario`` and ``--model``;
design ``websocket``: the official SDK's WebSocket mode, real tools on a sandbox copy per learner),
first alone on a single connection (``--single`` rollouts, one after the other: the baseline),
then on ``--connections`` connections at once, a thread each, all released together as a room
is when the instructor says "run it".

It is bounded: every rollout has a fixed number of turns, and the whole room has ``--deadline``
seconds, after which the server is stopped, which ends every connection; so the run stops by
itself even if the server hangs. Then it stops the server (SIGTERM, which drains overlapped
billing) and counts the billing ledger's rows in the server's SQLite file against the
responses the clients saw complete.

The server requires keys, as a room's does (docs/instructors.md, "Running labkit for a room"): each learner
has a key of their own (``--no-keys`` serves it open instead, everyone on any key).

With ``--hostile N`` the room runs twice, the second time beside a hostile learner: N raw
sockets of one extra key, each asking for 16 long answers at once (one ``stream_id`` lane each)
and never reading. A second table puts the other learners' TTFT without and with it side by
side, and the time of another learner's short answer (100 tokens, on a connection of its own)
alone and just after the hostile sockets opened, while their answers decode into their buffers:
a key holds at most its share of each replica's engine slots where keys are required, and the
server cuts a client that leaves more than ``--max-unread-bytes`` unread, so the room should
barely notice.

It prints one row: connections, errors, billing rows against responses, p50 and p99 time to
first token in the room with the single connection's in parentheses, and the server's peak
RSS. TTFT is measured by each client, from sending a turn to its first delta. The clients share
the machine with the server (N connections are N threads of this one Python process, plus a
sandbox test run per learner now and then), so on a small machine the room's TTFT includes the
clients' own wait for a CPU, which learners on their own laptops would not have. Peak RSS is the
high-water mark (VmHWM) of every server process, read just before stopping it and summed (with
``--workers`` the supervising parent is included; shared pages count in each process).

    python benchmarks/room_load.py                          # 64 connections, the room profile, 1 worker
    python benchmarks/room_load.py --workers 2
    python benchmarks/room_load.py --connections 16 --scenario synthetic:turns=4 --json
    python benchmarks/room_load.py --connections 16 --hostile 8 --scenario synthetic:turns=4
    python benchmarks/room_load.py --connections 16 --hostile 8 --scenario synthetic:turns=4 --no-keys
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import socket
import sqlite3
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from labkit.api.event_types import ERROR, RESPONSE_CREATE, TERMINAL_EVENTS
from labkit.api.extensions import TRACES_PATH
from labkit.client.agent import DEFAULT_MODEL, run_rollout
from labkit.client.launcher import LabkitServer
from labkit.client.records import TurnRecord
from labkit.paths import default_data_dir
from labkit.scenarios import DEFAULT_SCENARIO, Scenario, load_scenario
from labkit.server.edge.auth import Keys

DESIGN = "websocket"
MAX_ERRORS_SHOWN = 5
HOSTILE_KEY = "sk-labkit-hostile"
HOSTILE_ANSWERS = 16  # long answers each never-reading socket asks for at once, one lane each
HOSTILE_INPUT = "Write 50000 tokens."
SHORT_INPUT = "Write 100 tokens."  # another learner's short answer, timed alone and beside the hostile one
SHORT_SAMPLES = 5  # ... this many times each (their medians compared)
SHORT_KEY = "sk-labkit-short-answers"
HOSTILE_RCVBUF = 4096  # the socket's receive buffer: the kernel holds next to nothing for it
HOSTILE_MSS = 536  # bytes a segment (the IPv4 default): the server's kernel buffers few for it
MAX_HANDSHAKE_BYTES = 16_384  # the 101 answer is a few hundred bytes


@dataclass
class Phase:
    """Rollouts run alone (``single``) or all at once (``room``), as the clients saw them."""

    name: str
    connections: int
    rollouts: int = 0
    responses: int = 0
    errors: list[str] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    response_ids: list[tuple[str, str]] = field(default_factory=list)  # (response id, its key)

    def add(self, records: list[TurnRecord], error: str | None, key: str) -> None:
        self.rollouts += 1
        self.responses += len(records)
        self.ttft_s += [r.ttft for r in records if r.ttft is not None]
        self.response_ids += [(r.response_id, key) for r in records]
        if error is not None:
            self.errors.append(error)

    def percentile(self, q: int) -> float | None:
        return percentile(self.ttft_s, q)


def learner_key(number: int) -> str:
    """Learner ``number``'s key (each learner has their own, as in a room)."""
    return f"sk-labkit-learner-{number}"


def percentile(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def never_reading_socket(
    base_url: str,
    *,
    key: str = HOSTILE_KEY,
    answers: int = HOSTILE_ANSWERS,
    model: str = DEFAULT_MODEL,
    text: str = HOSTILE_INPUT,
    rcvbuf: int | None = HOSTILE_RCVBUF,
    timeout_s: float = 10.0,
) -> socket.socket:
    """A WebSocket client that asks for ``answers`` long answers at once and never reads them.

    A raw TCP socket: it reads only the handshake's 101 answer, sends one ``response.create`` a
    lane (masked text frames, as a client must), and then nothing. Whatever the server sends
    piles up unread. With a small ``rcvbuf`` (and small segments) the kernels hold next to
    nothing for it, so it piles up in the server, which soon cuts it; with ``rcvbuf=None`` the
    system's own buffers (several MB on loopback) take it first, so it decodes into them for
    seconds before anything is left unread in the server. Close the socket to end it.

        hostile = [never_reading_socket(server.base_url) for _ in range(8)]
    """
    url = httpx.URL(base_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connecting: a small window
        # Small segments too: the server's kernel sizes its send buffer by segments, so it holds little.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, HOSTILE_MSS)
    sock.settimeout(timeout_s)
    try:
        sock.connect((url.host, url.port or 80))
        nonce = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET {url.path}/responses HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {nonce}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        )
        head = _read_head(sock)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"the upgrade was refused: {head.splitlines()[0]!r}")
        for lane in range(answers):
            create = {"type": RESPONSE_CREATE, "model": model, "input": text, "store": False}
            sock.sendall(masked_text_frame(json.dumps({**create, "stream_id": f"long-{lane}"}).encode()))
    except BaseException:
        sock.close()
        raise
    return sock


def _read_head(sock: socket.socket) -> bytes:
    """The handshake's answer up to its blank line, a byte at a time: not one byte of a frame."""
    head = b""
    while not head.endswith(b"\r\n\r\n") and len(head) < MAX_HANDSHAKE_BYTES:
        byte = sock.recv(1)
        if not byte:
            raise ConnectionError("the server closed the connection during the handshake")
        head += byte
    return head


def masked_text_frame(payload: bytes) -> bytes:
    """One client-to-server text frame (RFC 6455: FIN, opcode 1, masked).

    >>> masked_text_frame(b"hi")[:2]
    b'\\x81\\x82'
    """
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        length = bytes([0x80 | size])
    elif size < 1 << 16:
        length = bytes([0x80 | 126]) + size.to_bytes(2, "big")
    else:
        length = bytes([0x80 | 127]) + size.to_bytes(8, "big")
    return b"\x81" + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@dataclass
class RoomResult:
    connections: int
    workers: int
    profile: str
    scenario: str
    single: Phase
    room: Phase
    model: str = DEFAULT_MODEL
    hostile: int = 0  # never-reading sockets beside the room's second run (``--hostile``)
    hostile_room: Phase | None = None  # that second run, as the room's learners saw it
    max_unread_bytes: int | None = None  # labkit serve --max-unread-bytes, None: its default
    keys: bool = True  # the server requires keys, one per learner (``--no-keys``: served open)
    hostile_rcvbuf: int | None = None  # the hostile sockets' receive buffer; None: the system's
    short_alone_s: list[float] = field(default_factory=list)  # another learner's short answers, alone
    short_beside_s: list[float] = field(default_factory=list)  # ... and beside the hostile learner
    short_waited: list[bool] = field(default_factory=list)  # ... whether each beside waited for a slot
    billing_rows: int = 0  # after the server stopped (and drained its billing queue)
    billing_rows_at_end: int = 0  # when the room's last rollout ended: how far billing lagged
    server_exit: int | None = None  # the server's exit status: negative is a signal (-9: killed)
    peak_rss_kb: dict[int, int] = field(default_factory=dict)  # server pid -> VmHWM
    server_cpu_s: dict[int, float] = field(default_factory=dict)  # server pid -> user + system
    client_cpu_s: float = 0.0  # this process and the test runs it started
    # The room's wait for an engine slot (the server's queue spans): what sizing the engine
    # changes. With several workers only the worker the fetch reaches answers: a sample.
    queue_s: list[float] = field(default_factory=list)
    hostile_queue_s: list[float] = field(default_factory=list)  # the same, beside the hostile learner

    @property
    def phases(self) -> list[Phase]:
        return [self.single, self.room] + ([self.hostile_room] if self.hostile_room else [])

    @property
    def responses(self) -> int:
        return sum(phase.responses for phase in self.phases)

    @property
    def errors(self) -> int:
        return sum(len(phase.errors) for phase in self.phases)

    @property
    def lost_billing_rows(self) -> int:
        return self.responses - self.billing_rows

    def json(self) -> dict[str, Any]:
        body = asdict(self)
        phases = ("single", "room") + (("hostile_room",) if self.hostile_room else ())
        for phase in phases:
            ttft = body[phase].pop("ttft_s")
            body[phase]["ttft_p50_s"] = getattr(self, phase).percentile(50)
            body[phase]["ttft_p99_s"] = getattr(self, phase).percentile(99)
            body[phase]["ttft_samples"] = len(ttft)
        for name in ("queue", "hostile_queue"):
            queue = body.pop(f"{name}_s")
            body.update({f"{name}_p50_s": percentile(queue, 50), f"{name}_p99_s": percentile(queue, 99)})
            body[f"{name}_samples"] = len(queue)
        for phase in phases:
            body[phase].pop("response_ids")
        body["short_alone_median_s"] = median(self.short_alone_s)
        body["short_beside_slowest_s"] = max(self.short_beside_s, default=None)
        body.update(responses=self.responses, errors=self.errors, lost_billing_rows=self.lost_billing_rows)
        return body


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def play(
    base_url: str, scenario: Scenario, model: str, key: str, start: threading.Barrier | None = None
) -> tuple[list[TurnRecord], str | None]:
    """One learner's rollout: the turns that completed, and what went wrong if anything did."""
    records: list[TurnRecord] = []
    try:
        if start is not None:
            start.wait()
        for record in run_rollout(base_url, DESIGN, scenario, model=model, api_key=key):
            records.append(record)
        if len(records) != scenario.turns:
            return records, f"the rollout ended after {len(records)} of {scenario.turns} turns"
    except Exception as exc:  # a learner's failure is counted, not raised: the room goes on
        return records, f"{type(exc).__name__}: {exc}"
    return records, None


def run_room(
    *,
    connections: int = 64,
    workers: int = 1,
    profile: str = "room",
    scenario: str = DEFAULT_SCENARIO,
    model: str = DEFAULT_MODEL,
    single: int = 3,
    deadline_s: float = 600.0,
    hostile: int = 0,
    max_unread_bytes: int | None = None,
    keys: bool = True,
    hostile_rcvbuf: int | None = None,
) -> RoomResult:
    """Start a server, run the single-connection baseline and the room (and with ``hostile``,
    another learner's short answers alone, then the room again beside that many never-reading
    sockets, the short answers first), stop it, count."""
    chosen = load_scenario(scenario, default_data_dir())
    single_phase, room_phase = Phase("single", 1), Phase("room", connections)
    result = RoomResult(connections, workers, profile, chosen.name, single_phase, room_phase)
    result.model, result.hostile, result.max_unread_bytes = model, hostile, max_unread_bytes
    result.keys, result.hostile_rcvbuf = keys, hostile_rcvbuf
    args = ["--profile", profile]
    if max_unread_bytes is not None:
        args += ["--max-unread-bytes", str(max_unread_bytes)]
    every_key = [learner_key(i) for i in range(connections)] + [HOSTILE_KEY, SHORT_KEY]
    env = {"LABKIT_API_KEYS": ",".join(every_key)} if keys else {"LABKIT_API_KEYS": ""}
    cpu_before = _own_cpu_s()
    with LabkitServer(args=args, workers=workers, env=env) as server:
        started = time.perf_counter()
        for _ in range(single):
            single_phase.add(*play(server.base_url, chosen, model, learner_key(0)), learner_key(0))
        single_phase.wall_s = time.perf_counter() - started

        late = _play_room(server, chosen, model, room_phase, deadline_s, result)
        if not late and hostile:
            result.hostile_room = Phase("room beside the hostile learner", connections)
            with connect(server.ws_url, additional_headers=_auth(SHORT_KEY), open_timeout=30) as short:
                short_answer(short, model)  # warm: its connection, the replica's prefix cache
                result.short_alone_s = [short_answer(short, model)[0] for _ in range(SHORT_SAMPLES)]
                sockets = [
                    never_reading_socket(server.base_url, model=model, rcvbuf=hostile_rcvbuf)
                    for _ in range(hostile)
                ]
                try:
                    beside = [short_answer(short, model) for _ in range(SHORT_SAMPLES)]
                    result.short_beside_s = [seconds for seconds, _ in beside]
                    result.short_waited = _waited(server.base_url, [rid for _, rid in beside])
                    late = _play_room(server, chosen, model, result.hostile_room, deadline_s, result)
                finally:
                    for sock in sockets:
                        sock.close()
        if not late:
            _measure_server(server, result)
            result.queue_s = _queue_waits(server.base_url, room_phase.response_ids)
            if result.hostile_room is not None:
                result.hostile_queue_s = _queue_waits(server.base_url, result.hostile_room.response_ids)
        result.billing_rows_at_end = _ledger_rows(server.db)
        server.stop()  # SIGTERM: every worker drains its billing queue before it exits
        result.server_exit = server.process.returncode if server.process else None
        result.billing_rows = _ledger_rows(server.db)
    result.client_cpu_s = _own_cpu_s() - cpu_before
    return result


def _play_room(
    server: LabkitServer, scenario: Scenario, model: str, phase: Phase, deadline_s: float, result: RoomResult
) -> bool:
    """Every learner's rollout at once, all released together; True if the deadline cut it short
    (the server is then stopped, after its peak RSS and CPU are read)."""
    start = threading.Barrier(phase.connections, timeout=60)
    started = time.perf_counter()
    keys = [learner_key(i) for i in range(phase.connections)]
    with ThreadPoolExecutor(phase.connections, thread_name_prefix="learner") as pool:
        futures = [pool.submit(play, server.base_url, scenario, model, key, start) for key in keys]
        done, late = wait(futures, timeout=deadline_s)
        if late:
            # Stopping the server ends every connection, so each late rollout fails and returns.
            _measure_server(server, result)
            server.stop()
        for future, key in zip(futures, keys, strict=True):
            records, error = future.result()
            phase.add(records, error if future in done else f"past the deadline; {error}", key)
    phase.wall_s = time.perf_counter() - started
    return bool(late)


def _measure_server(server: LabkitServer, result: RoomResult) -> None:
    """Peak RSS and CPU time of every server process, read from /proc while they still run."""
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in server.processes():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # no /proc here, or the process is gone
        hwm = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), "0")
        result.peak_rss_kb[pid] = int(hwm)
        result.server_cpu_s[pid] = (int(stat[11]) + int(stat[12])) / ticks  # utime, stime


def _queue_waits(base_url: str, response_ids: list[tuple[str, str]]) -> list[float]:
    """How long each response waited for an engine slot, from the server's spans (one connection,
    so with several workers, the responses of the worker it reached)."""
    return [span["duration"] for span in _queue_spans(base_url, response_ids)]


def _waited(base_url: str, response_ids: list[str]) -> list[bool]:
    """Whether each of the short answers waited for a slot (its queue span's verdict)."""
    spans = _queue_spans(base_url, [(rid, SHORT_KEY) for rid in response_ids])
    return [bool(span["detail"].get("waited", span["duration"] > 0.001)) for span in spans]


def _queue_spans(base_url: str, response_ids: list[tuple[str, str]]) -> list[dict[str, Any]]:
    spans = []
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for response_id, key in response_ids:
            reply = client.get(TRACES_PATH, params={"response_id": response_id}, headers=_auth(key))
            if reply.status_code == 200:
                spans += [s for s in reply.json()["data"] if s["stage"] == "queue"]
    return spans


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def short_answer(ws: Any, model: str) -> tuple[float, str]:
    """One short answer on a connection that reads: seconds from its create to its last event,
    and its id."""
    started = time.perf_counter()
    ws.send(json.dumps({"type": RESPONSE_CREATE, "model": model, "input": SHORT_INPUT, "store": False}))
    while True:
        event = json.loads(ws.recv(timeout=60))
        if event["type"] == ERROR:
            raise RuntimeError(f"the short answer failed: {event['error']['message']}")
        if event["type"] in TERMINAL_EVENTS:
            return time.perf_counter() - started, event["response"]["id"]


def _own_cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _ledger_rows(db: Path) -> int:
    """Billing rows of the room's learners (the hostile learner's cut responses are billed too, and
    the short answers timed beside it: neither is counted)."""
    others = [Keys().owner(f"Bearer {key}") for key in (HOSTILE_KEY, SHORT_KEY)]
    with sqlite3.connect(db) as conn:
        query = "SELECT COUNT(*) FROM billing WHERE owner NOT IN (?, ?)"
        return conn.execute(query, others).fetchone()[0]


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    ms = seconds * 1000
    return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def format_table(result: RoomResult) -> str:
    room, single = result.room, result.single
    rss_mb = sum(result.peak_rss_kb.values()) / 1024
    per_process = " + ".join(f"{kb / 1024:.0f}" for kb in result.peak_rss_kb.values())
    rows = [
        "| connections | workers | errors | billing rows / responses | p50 TTFT (single) "
        "| p99 TTFT (single) | peak RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result.connections} | {result.workers} | {result.errors} "
        f"| {result.billing_rows:,} / {result.responses:,} "
        f"| {_ms(room.percentile(50))} ({_ms(single.percentile(50))}) "
        f"| {_ms(room.percentile(99))} ({_ms(single.percentile(99))}) "
        f"| {rss_mb:.0f} MB |",
        "",
        f"profile {result.profile}, scenario {result.scenario}, model {result.model}, design {DESIGN}",
        f"room: {room.rollouts} rollouts, {room.responses:,} responses in {room.wall_s:.1f} s; "
        f"single: {single.rollouts} rollouts, {single.responses} responses in {single.wall_s:.1f} s",
        f"engine queue wait in the room (server spans of {len(result.queue_s):,} responses): "
        f"p50 {_ms(percentile(result.queue_s, 50))}, p99 {_ms(percentile(result.queue_s, 99))}",
        f"billing rows lost: {result.lost_billing_rows} ({result.billing_rows_at_end:,} written when "
        f"the room ended, the rest at shutdown; server exit status {result.server_exit})",
        f"peak RSS per server process (MB): {per_process or 'n/a'}",
        "server CPU (s): "
        + (" + ".join(f"{s:.1f}" for s in result.server_cpu_s.values()) or "n/a")
        + f"; clients and their test runs: {result.client_cpu_s:.1f} s",
    ]
    rows += hostile_rows(result)
    errors = [error for phase in result.phases for error in phase.errors]
    rows += [f"error: {e}" for e in errors[:MAX_ERRORS_SHOWN]]
    if len(errors) > MAX_ERRORS_SHOWN:
        rows.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors")
    return "\n".join(rows)


def hostile_rows(result: RoomResult) -> list[str]:
    """Another learner's short answer alone and beside the hostile learner (its slowest of
    ``SHORT_SAMPLES``), and the room's TTFT without and beside it, side by side (none without one)."""
    beside = result.hostile_room
    if beside is None:
        return []
    alone = result.room
    bound = "its default" if result.max_unread_bytes is None else f"{result.max_unread_bytes:,} bytes"
    short_alone = median(result.short_alone_s)
    short_slowest = max(result.short_beside_s, default=None)
    return [
        "",
        "| learners | hostile sockets x answers | short answer alone / beside (slowest) | ratio "
        "| room p50 TTFT without / beside | room p99 TTFT without / beside | errors beside |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result.connections} | {result.hostile} x {HOSTILE_ANSWERS} "
        f"| {_ms(short_alone)} / {_ms(short_slowest)} | {_ratio(short_slowest, short_alone)} "
        f"| {_ms(alone.percentile(50))} / {_ms(beside.percentile(50))} "
        f"| {_ms(alone.percentile(99))} / {_ms(beside.percentile(99))} | {len(beside.errors)} |",
        "",
        f"hostile learner: {result.hostile} sockets of one key, each asking for {HOSTILE_ANSWERS} answers "
        f"of '{HOSTILE_INPUT}' at once and never reading; --max-unread-bytes {bound}; "
        + ("keys required (a key's share of each replica's slots)" if result.keys else "served open")
        + ("; the system's socket buffers" if result.hostile_rcvbuf is None else "; small socket buffers"),
        f"short answer: '{SHORT_INPUT}' on a connection of another key, median of {SHORT_SAMPLES} alone, "
        f"slowest of {SHORT_SAMPLES} just after the hostile sockets opened "
        f"({', '.join(_ms(s) for s in result.short_beside_s)}); "
        f"{sum(result.short_waited)} of them waited for an engine slot",
        f"the room's engine queue wait beside it ({len(result.hostile_queue_s):,} server spans): "
        f"p50 {_ms(percentile(result.hostile_queue_s, 50))}, "
        f"p99 {_ms(percentile(result.hostile_queue_s, 99))}",
    ]


def _ratio(value: float | None, base: float | None) -> str:
    return "n/a" if value is None or not base else f"{value / base:.2f}x"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=64, help="learners, each on its own WebSocket")
    parser.add_argument("--workers", type=int, default=1, help="labkit serve --workers")
    parser.add_argument("--profile", default="room", help="labkit serve --profile")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO, help="a scenario or synthetic:...")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--single", type=int, default=3, help="baseline rollouts on a single connection")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds the room may take at most")
    parser.add_argument(
        "--hostile",
        type=int,
        default=0,
        metavar="N",
        help=f"run the room again beside N never-reading sockets x {HOSTILE_ANSWERS} long answers of one key",
    )
    parser.add_argument(
        "--max-unread-bytes", type=int, metavar="N", help="labkit serve --max-unread-bytes (default: its own)"
    )
    parser.add_argument(
        "--no-keys", action="store_true", help="serve the room open (any key) instead of a key per learner"
    )
    parser.add_argument(
        "--small-buffers",
        action="store_true",
        help=f"give the hostile sockets {HOSTILE_RCVBUF:,}-byte receive buffers, so what they leave unread "
        "piles up in the server at once (default: the system's, which take several MB each first)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.workers < 1 or args.single < 1:
        parser.error("--connections, --workers and --single must be 1 or more")
    if args.hostile < 0 or (args.max_unread_bytes is not None and args.max_unread_bytes < 1):
        parser.error("--hostile must be 0 or more, --max-unread-bytes 1 or more")
    result = run_room(
        connections=args.connections,
        workers=args.workers,
        profile=args.profile,
        scenario=args.scenario,
        model=args.model,
        single=args.single,
        deadline_s=args.deadline,
        hostile=args.hostile,
        max_unread_bytes=args.max_unread_bytes,
        keys=not args.no_keys,
        hostile_rcvbuf=HOSTILE_RCVBUF if args.small_buffers else None,
    )
    print(json.dumps(result.json(), indent=2) if args.json else format_table(result))


if __name__ == "__main__":
    main()
