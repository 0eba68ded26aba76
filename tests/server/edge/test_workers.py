"""``labkit serve --workers N``: several processes on one port, sharing state through SQLite.

Each HTTP request here opens a new connection, so the kernel hands requests to either worker;
which worker served a request is read off /proc (the worker holding the server's end of the
connection), so the tests check that chains really cross workers rather than hoping they do.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labkit.client.agent import run_rollout
from labkit.client.launcher import LabkitServer
from labkit.scenarios import synthetic
from tests.helpers import port_of, worker_holding

pytestmark = [
    pytest.mark.slow,  # several worker processes
    pytest.mark.skipif(
        not Path("/proc/net/tcp").exists() or not hasattr(os, "fork"), reason="needs Linux's /proc and fork"
    ),
]

KEY = "sk-labkit-workers"
HEADERS = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
CHAINS, TURNS = 6, 8


def request(
    server: LabkitServer, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any], int]:
    """One request on a new connection: status, JSON body, and the worker that served it."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=30)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, HEADERS)
        reply = conn.getresponse()
        data = json.loads(reply.read())
        return reply.status, data, worker_holding(server, conn.sock.getsockname()[1])
    finally:
        conn.close()


def ledger_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM billing").fetchone()[0]


def gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def wait_until(condition: Any, attempts: int = 200) -> bool:
    for _ in range(attempts):  # bounded: 10 s at most
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_http_chains_cross_workers_through_the_shared_store() -> None:
    with LabkitServer(workers=2, args=["--profile", "local"]) as server:
        workers = server.processes()[1:]
        assert len(workers) == 2

        def chain(number: int) -> list[tuple[str, int, int]]:
            """TURNS responses, each continuing the previous one: (id, worker, input tokens)."""
            steps: list[tuple[str, int, int]] = []
            previous = None
            for turn in range(TURNS):
                body: dict[str, Any] = {"model": "labkit-spark", "input": f"Chain {number}, turn {turn}."}
                if previous:
                    body["previous_response_id"] = previous
                status, data, worker = request(server, "POST", "/v1/responses", body)
                assert status == 200, data
                assert data["status"] == "completed" and data["previous_response_id"] == previous
                steps.append((data["id"], worker, data["usage"]["input_tokens"]))
                previous = data["id"]
            return steps

        with ThreadPoolExecutor(CHAINS) as pool:  # concurrent writers in both workers
            chains = list(pool.map(chain, range(CHAINS)))

        served = [worker for steps in chains for _, worker, _ in steps]
        assert set(served) == set(workers), "every worker served requests"
        crossings = sum(a[1] != b[1] for steps in chains for a, b in itertools.pairwise(steps))
        assert crossings > 0, "some follow-ups were served by another worker than their parent"
        for steps in chains:  # each turn's prompt holds the whole chain, wherever it ran
            tokens = [t for _, _, t in steps]
            assert tokens == sorted(tokens) and len(set(tokens)) == TURNS, tokens

        ids = [rid for steps in chains for rid, _, _ in steps]
        getters = set()
        for rid in ids:
            status, data, worker = request(server, "GET", f"/v1/responses/{rid}")
            assert status == 200 and data["id"] == rid, data
            getters.add(worker)
        assert getters == set(workers)
        status, items, _ = request(server, "GET", f"/v1/responses/{ids[-1]}/input_items?order=asc")
        assert status == 200, items
        assert items["data"][0]["content"][0]["text"] == f"Chain {CHAINS - 1}, turn {TURNS - 1}."

        server.stop()
        assert server.process is not None and server.process.returncode == 0  # stopped, not killed
        assert ledger_rows(server.db) == len(ids) == CHAINS * TURNS


def test_websocket_mode_runs_on_every_worker() -> None:
    scenario = synthetic(turns=4, output_tokens=20, tool_tokens=200, instruction_tokens=300)
    with LabkitServer(workers=2, args=["--profile", "local"]) as server:

        def rollout(_: int) -> list[str]:
            records = list(run_rollout(server.base_url, "websocket", scenario, api_key=KEY))
            assert [r.turn for r in records] == list(range(scenario.turns))
            # Follow-ups were served from the connection's cache, on the connection's worker.
            assert all(r.usage and r.usage["input_tokens_details"]["cached_tokens"] for r in records[1:])
            return [r.response_id for r in records]

        with ThreadPoolExecutor(8) as pool:
            responses = [rid for ids in pool.map(rollout, range(8)) for rid in ids]
        assert len(set(responses)) == 8 * scenario.turns
        server.stop()  # billing is overlapped in WebSocket mode: stopping drains it
        assert ledger_rows(server.db) == len(responses)


def test_sigterm_stops_every_worker() -> None:
    with LabkitServer(workers=3, args=["--profile", "local"]) as server:
        pids = server.processes()
        assert len(pids) == 4
        assert request(server, "POST", "/v1/responses", {"model": "labkit-spark", "input": "hi"})[0] == 200
        server.stop()  # SIGTERM to the parent, as LabkitServer always stops it
        assert server.process is not None and server.process.returncode == 0
        assert all(gone(pid) for pid in pids)


def test_workers_stop_by_themselves_when_the_parent_is_killed() -> None:
    with LabkitServer(workers=2, args=["--profile", "local"]) as server:
        parent, *workers = server.processes()
        os.kill(parent, signal.SIGKILL)
        assert wait_until(lambda: all(gone(pid) for pid in workers))


def test_a_worker_that_dies_is_replaced() -> None:
    with LabkitServer(workers=2, args=["--profile", "local"]) as server:
        _, first, second = server.processes()
        os.kill(first, signal.SIGKILL)

        def replaced() -> bool:
            pids = server.processes()  # one reading: the killed worker may vanish between two
            return len(pids) == 3 and first not in pids

        assert wait_until(replaced)
        replacement = next(pid for pid in server.processes()[1:] if pid != second)
        # The new worker serves: keep asking on new connections until it has answered one.
        assert wait_until(
            lambda: (
                request(server, "POST", "/v1/responses", {"model": "labkit-spark", "input": "x"})[2]
                == replacement
            )
        )
        assert any(f"(pid {first}) exited with code -9; starting another" in line for line in server.log)


def labkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_workers_need_a_shared_database_file() -> None:
    result = labkit("serve", "--port", "0", "--workers", "2", "--db", ":memory:")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--db :memory:" in result.stderr, result.stderr


@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_workers_must_be_a_positive_count(count: str) -> None:
    result = labkit("serve", "--workers", count)
    assert result.returncode == 2 and "--workers" in result.stderr and result.stderr.count("\n") == 1


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """The supervisor with a stand-in server whose start fails, in a process of its own."""
    script = textwrap.dedent(
        """
        import socket
        from types import SimpleNamespace
        from labkit.server.edge.workers import Supervisor, WorkersError

        class Failing:
            started, should_exit = False, False
            config = SimpleNamespace(timeout_graceful_shutdown=None)

            async def serve(self, sockets):
                raise SystemExit(3)  # what uvicorn does when the app's startup fails

        supervisor = Supervisor(Failing(), socket.socket(), 2, start_timeout_s=30)
        try:
            supervisor.start()
        except WorkersError as e:
            print("refused:", e)
        finally:
            supervisor.stop()
        print("left:", sum(w.process.is_alive() for w in supervisor.workers))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert re.search(r"^refused: worker [12] exited with code 3 before serving", result.stdout, re.M), result
    assert "left: 0" in result.stdout
