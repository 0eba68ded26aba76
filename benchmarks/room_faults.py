"""What a room's server costs its clients when something goes wrong underneath it, measured.

Starts ``labkit serve`` on loopback (the ``local`` profile: no modeled delays, so what is timed
is the server's own work) once per fault, and measures from outside, as a client would:

- **database locked**: another process holds the SQLite file's write lock for ``LOCK_S``; a
  ``store: true`` create is sent first (it needs the file), then ``/healthz`` and ``store:
  false`` creates are timed (the first of these pays the ledger's wait for the lock: its charge
  is kept for later), against the same requests without the lock; then reads of what was stored
  before the lock: ``GET /v1/responses/{id}``, its ``input_items``, and a ``store: false``
  follow-up through ``previous_response_id`` (history hydration);
- **descriptors**: ``PILE_UP`` connections each send a request line and one header, then
  nothing, to a server started with a soft limit of ``SOFT_LIMIT`` open files (the hard one as
  the system allows, then also ``SOFT_LIMIT``); then a new client's ``/healthz`` is timed, and
  ``WATCH_S`` after the pile-up, how many of the half-sent requests the server has closed;
- **disk full**: the server's ``RLIMIT_FSIZE`` is lowered to one byte (``prlimit``, on the
  child only) while 96 WebSocket responses finish and queue their charges behind a 300 ms
  billing service; then SIGTERM, and the time until the process has exited (killed after
  ``KILL_AFTER_S``) and what its log says of the charges;
- **chunk flood**: a 0.7 MB body sent as 700,000 one-byte chunks, while ``/healthz`` is asked
  every 10 ms: its slowest answer, and when the flood was answered;
- **WebSocket pings and fragments**: 50 MB of pings whose pongs are never read, and one message
  in 1,000,000 one-byte fragments: the server's peak RSS growth (VmHWM) for each.

Every step is bounded and the script stops by itself. Linux only (prlimit, /proc).

    python benchmarks/room_faults.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from labkit.api.event_types import RESPONSE_CREATE, TERMINAL_EVENT
from labkit.client.launcher import LabkitServer

MODEL = "labkit-spark"
KEY = "sk-labkit-faults"
LOCK_S = 8.0  # how long the other process holds the write lock
SAMPLES = 5  # requests timed without the lock (their median)
KILL_AFTER_S = 30.0  # a shutdown still running then is killed: "never ended"
CONNECTIONS, LANES = 6, 16  # responses finishing together before the SIGTERM
FLOOD_CHUNKS = 700_000
PROBE_EVERY_S = 0.01  # how often /healthz is asked during the flood
PING_FLOOD_BYTES = 50 * 1024 * 1024
FRAGMENTS = 1_000_000
SEND_STALL_S = 2.0  # a send that makes no progress this long: the server stopped reading
PILE_UP = 1_076  # half-sent requests, as many as in the report that found the problem
SOFT_LIMIT = 1_024  # open files: the soft limit most Linux sessions start with
HALF_HEAD = b"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\n"  # a request line and one header
WATCH_S = 8.0  # after the pile-up, when the closed half-sent requests are counted
PROBE_BOUND_S = 30.0  # a /healthz still unanswered then: "no answer"
HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def create(http: httpx.Client, base_url: str, store: bool) -> int:
    body = {"model": MODEL, "input": "Say hello.", "store": store}
    return http.post(f"{base_url}/responses", json=body).status_code


# ---------------------------------------------------------------- the database locked


def locked_database(tmp: Path) -> list[tuple[str, str]]:
    db = tmp / "locked.sqlite3"
    with (
        LabkitServer(db=db, args=["--profile", "local"]) as server,
        httpx.Client(timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        root = server.base_url.removesuffix("/v1")
        body = {"model": MODEL, "input": "Say hello.", "store": True}
        stored_id = http.post(f"{server.base_url}/responses", json=body).json()["id"]
        reads = _stored_reads(http, server.base_url, stored_id)
        health = statistics.median(timed(lambda: http.get(f"{root}/healthz"))[0] for _ in range(SAMPLES))
        unstored = statistics.median(
            timed(lambda: create(http, server.base_url, False))[0] for _ in range(SAMPLES)
        )
        read_alone = {name: statistics.median(timed(read)[0] for _ in range(SAMPLES)) for name, read in reads}
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(db), str(LOCK_S)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            stored: list[tuple[float, int]] = []
            waiting = threading.Thread(
                target=lambda: stored.append(
                    timed(lambda: create(httpx.Client(timeout=60), server.base_url, True))
                )
            )
            waiting.start()
            time.sleep(0.3)  # the store=true create is past its model work and waits for the file
            read_locked = _at_once(reads)  # while that create waits
            health_locked, _ = timed(lambda: http.get(f"{root}/healthz"))
            locked = [timed(lambda: create(http, server.base_url, False)) for _ in range(SAMPLES)]
            waiting.join(60)
        finally:
            holder.wait(LOCK_S + 10)
    stored_s, stored_status = stored[0] if stored else (float("nan"), 0)
    return [
        ("/healthz (median alone / while locked)", f"{_ms(health)} / {_ms(health_locked)}"),
        (
            "store=false create (median alone / while locked: the first, the median)",
            f"{_ms(unstored)} / {_ms(locked[0][0])}, {_ms(statistics.median(t for t, _ in locked))} "
            f"({', '.join(str(status) for _, status in locked)})",
        ),
        ("store=true create while locked", f"{stored_status} after {_ms(stored_s)}"),
        *(
            (
                f"{name} (median alone / while locked, behind the waiting store=true create)",
                f"{_ms(read_alone[name])} / {read_locked[name][1]} after {_ms(read_locked[name][0])}",
            )
            for name, _ in reads
        ),
    ]


def _stored_reads(http: httpx.Client, base_url: str, stored_id: str) -> list[tuple[str, Callable[[], int]]]:
    """The reads of a response stored before the lock, each returning its status."""
    follow_up = {"model": MODEL, "input": "And again.", "store": False, "previous_response_id": stored_id}
    stored = f"{base_url}/responses/{stored_id}"
    return [
        ("GET /v1/responses/{id}", lambda: http.get(stored).status_code),
        ("GET its input_items", lambda: http.get(f"{stored}/input_items").status_code),
        (
            "store=false follow-up by previous_response_id",
            lambda: http.post(f"{base_url}/responses", json=follow_up).status_code,
        ),
    ]


def _at_once(calls: list[tuple[str, Callable[[], int]]]) -> dict[str, tuple[float, int]]:
    """Each call timed, all started together (one thread each): none waits for another."""
    results: dict[str, tuple[float, int]] = {}
    threads = [
        threading.Thread(target=lambda name=name, call=call: results.__setitem__(name, timed(call)))
        for name, call in calls
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


# ---------------------------------------------------------------- the disk full, then SIGTERM


def slow_billing_profile(tmp: Path) -> Path:
    from labkit.paths import default_data_dir

    text = (default_data_dir() / "profiles" / "local.toml").read_text()
    text = re.sub(r"(\[billing\]\s*\n(?:#.*\n)*hop_ms = )\d+", r"\g<1>300", text)
    path = tmp / "slow-billing.toml"
    path.write_text(text)
    return path


def full_disk_shutdown(tmp: Path) -> list[tuple[str, str]]:
    profile = slow_billing_profile(tmp)
    server = LabkitServer(db=tmp / "full.sqlite3", args=["--profile", str(profile)]).start()
    try:
        pid = server.processes()[0]
        _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, hard))
        finished = _responses_at_once(server)
        assert server.process is not None
        server.process.terminate()
        try:
            seconds, _ = timed(lambda: server.process.wait(KILL_AFTER_S))  # type: ignore[union-attr]
            ended = f"{seconds:.1f} s, exit {server.process.returncode}"
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
            ended = f"never (killed after {KILL_AFTER_S:g} s)"
    finally:
        server.close()
    lost = [line for line in server.log if "lost" in line and "billing" in line]
    tracebacks = sum("Traceback" in line for line in server.log)
    return [
        (f"SIGTERM with the disk full, {finished} charges queued", ended),
        ("what the log says of the charges", lost[-1].split("billing: ", 1)[-1] if lost else "nothing"),
        ("tracebacks in the log", str(tracebacks)),
    ]


def _responses_at_once(server: LabkitServer) -> int:
    sockets = [
        connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}, open_timeout=30)
        for _ in range(CONNECTIONS)
    ]
    finished = 0
    try:
        for ws in sockets:
            for lane in range(LANES):
                create = {"type": RESPONSE_CREATE, "model": MODEL, "input": "Say hi.", "store": False}
                ws.send(json.dumps({**create, "stream_id": f"lane-{lane}"}))
        for ws in sockets:
            for _ in range(10_000):
                if json.loads(ws.recv(timeout=60))["type"] == TERMINAL_EVENT["completed"]:
                    finished += 1
                    if finished % LANES == 0:
                        break
    finally:
        for ws in sockets:
            ws.close()
    return finished


# ---------------------------------------------------------------- a body in one-byte chunks


def chunk_flood(tmp: Path) -> list[tuple[str, str]]:
    with LabkitServer(db=tmp / "flood.sqlite3", args=["--profile", "local"]) as server:
        url = httpx.URL(server.base_url)
        root = server.base_url.removesuffix("/v1")
        probes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            with httpx.Client(timeout=60) as http:
                while not done.is_set():
                    probes.append(timed(lambda: http.get(f"{root}/healthz"))[0])
                    time.sleep(PROBE_EVERY_S)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        flood = b"1\r\nx\r\n" * FLOOD_CHUNKS + b"0\r\n\r\n"
        head = (
            f"POST /v1/responses HTTP/1.1\r\nHost: {url.host}\r\nAuthorization: Bearer {KEY}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        started = time.perf_counter()
        with socket.create_connection((url.host, url.port), timeout=60) as sock:
            sender = threading.Thread(target=_send_all, args=(sock, head + flood), daemon=True)
            sender.start()
            answer = b""
            with contextlib.suppress(OSError):
                while chunk := sock.recv(65536):
                    answer += chunk
            answered = time.perf_counter() - started
        time.sleep(0.2)
        done.set()
        prober.join(10)
    status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1") else "none"
    return [
        ("700,000 one-byte chunks: the answer", f"{status} after {_ms(answered)}"),
        (
            f"/healthz meanwhile ({len(probes)} asked): median / slowest",
            f"{_ms(statistics.median(probes))} / {_ms(max(probes))}",
        ),
    ]


def _send_all(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


# ---------------------------------------------------------------- half-sent requests piling up


def descriptor_pile_up(tmp: Path) -> list[tuple[str, str]]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this side holds PILE_UP sockets too
    rows = []
    for hard_too in (False, True):
        with _started_with_soft_limit(tmp, SOFT_LIMIT) as server:
            pid = server.processes()[0]
            if hard_too:  # as on a system whose hard limit is the same: the server cannot raise it
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (SOFT_LIMIT, SOFT_LIMIT))
            soft = resource.prlimit(pid, resource.RLIMIT_NOFILE)[0]
            before = _peak_kb(pid)
            answered, closed = _healthz_under_pile_up(server)
            grown_mb = (_peak_kb(pid) - before) / 1024
        which = f"hard {SOFT_LIMIT:,} too" if hard_too else "hard as the system allows"
        rows.append(
            (
                f"/healthz under {PILE_UP:,} half-sent requests (started with soft {SOFT_LIMIT:,}, {which}; "
                f"serving with {soft:,})",
                answered,
            )
        )
        rows.append((f"half-sent requests the server had closed {WATCH_S:g} s after the pile-up", closed))
        rows.append(("the server's peak RSS growth meanwhile", f"{grown_mb:.1f} MB"))
    return rows


@contextlib.contextmanager
def _started_with_soft_limit(tmp: Path, soft: int) -> Iterator[LabkitServer]:
    """``labkit serve`` started with ``soft`` open files as its soft limit (inherited from here)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
    try:
        server = LabkitServer(db=tmp / "descriptors.sqlite3", args=["--profile", "local"]).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    try:
        yield server
    finally:
        server.close()


def _healthz_under_pile_up(server: LabkitServer) -> tuple[str, str]:
    """How long a new client's ``/healthz`` took once ``PILE_UP`` half-sent requests were open,
    and how many of those the server had closed ``WATCH_S`` later."""
    url = httpx.URL(server.base_url)
    half_sent: list[socket.socket] = []
    try:
        for _ in range(PILE_UP):
            sock = socket.create_connection((url.host, url.port), timeout=10)
            sock.sendall(HALF_HEAD)
            half_sent.append(sock)
        piled_at = time.monotonic()
        probe: list[str] = []

        def ask() -> None:
            try:
                seconds, answer = timed(
                    lambda: httpx.get(f"{server.base_url.removesuffix('/v1')}/healthz", timeout=PROBE_BOUND_S)
                )
                probe.append(f"{answer.status_code} after {_ms(seconds)}")
            except httpx.TimeoutException:
                probe.append(f"no answer in {PROBE_BOUND_S:g} s")

        prober = threading.Thread(target=ask, daemon=True)
        prober.start()
        time.sleep(max(0.0, piled_at + WATCH_S - time.monotonic()))
        closed = _closed_by_server(half_sent)
        prober.join(PROBE_BOUND_S + 5)
    finally:
        for sock in half_sent:
            sock.close()
    return (probe[0] if probe else "no answer"), f"{closed:,} of {PILE_UP:,}"


def _closed_by_server(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has answered or closed (readable now: an answer, or the end)."""
    with selectors.DefaultSelector() as selector:  # epoll or kqueue: select() stops at 1,024
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        return len(selector.select(0))


# ---------------------------------------------------------------- WebSocket pings and fragments


def websocket_memory(tmp: Path) -> list[tuple[str, str]]:
    rows = []
    with LabkitServer(db=tmp / "ws.sqlite3", args=["--profile", "local"]) as server:
        pid = server.processes()[0]
        pings = _frame(0x9, b"p" * 125) * (PING_FLOOD_BYTES // 131)
        fragments = (
            _frame(0x1, b"x", fin=False) + _frame(0x0, b"x", fin=False) * (FRAGMENTS - 2) + _frame(0x0, b"x")
        )
        for name, data in (
            ("50 MB of pings, pongs never read", pings),
            ("1,000,000 one-byte fragments", fragments),
        ):
            before = _peak_kb(pid)
            with _upgraded(server) as sock:
                sent = _send_until_stalled(sock, data)
                _first_answer(sock)  # the server has worked through what it took
            rows.append(
                (
                    f"{name}: peak RSS growth, bytes the server took",
                    f"{(_peak_kb(pid) - before) / 1024:.1f} MB, {sent / 1e6:.1f} of {len(data) / 1e6:.1f} MB",
                )
            )
    return rows


def _frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame, masked (a zero mask would spare the server the copy of each payload)."""
    mask = b"\x5a\xa5\x3c\xc3"
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | len(payload)]) + mask + masked


@contextlib.contextmanager
def _upgraded(server: LabkitServer) -> Iterator[socket.socket]:
    url = httpx.URL(server.base_url)
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        sock.sendall(
            f"GET {url.path}/responses HTTP/1.1\r\nHost: {url.host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(1)
        yield sock


def _send_until_stalled(sock: socket.socket, data: bytes) -> int:
    sock.settimeout(SEND_STALL_S)
    view, sent = memoryview(data), 0
    with contextlib.suppress(OSError):
        while sent < len(data):
            sent += sock.send(view[sent : sent + 65536])
    return sent


def _first_answer(sock: socket.socket) -> None:
    """Wait (at most a minute) for the server's first frame after what was sent, or its close."""
    sock.settimeout(60)
    with contextlib.suppress(OSError):
        sock.recv(1)


def _peak_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


FAULTS = {
    "lock": locked_database,
    "disk": full_disk_shutdown,
    "flood": chunk_flood,
    "descriptors": descriptor_pile_up,
    "websocket": websocket_memory,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(FAULTS), action="append", help="run only these (repeatable)")
    args = parser.parse_args(argv)
    print("| fault | measured |\n|---|---:|")
    with tempfile.TemporaryDirectory(prefix="labkit-faults-") as tmp:
        for name in args.only or list(FAULTS):
            for what, value in FAULTS[name](Path(tmp)):
                print(f"| {what} | {value} |", flush=True)


if __name__ == "__main__":
    main()
