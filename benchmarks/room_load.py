"""A workshop room on one server: N learners at once, each on a WebSocket connection of their own.

Starts ``labkit serve --profile PROFILE --workers W`` on loopback with a temporary database and
runs the default agent rollout (scenario ``fix-failing-test``, model ``labkit-spark``, design
``websocket``: the official SDK's WebSocket mode, real tools on a sandbox copy per learner),
first alone on a single connection (``--single`` rollouts, one after the other: the baseline),
then on ``--connections`` connections at once, a thread each, all released together as a room
is when the instructor says "run it".

It is bounded: every rollout has a fixed number of turns, and the whole room has ``--deadline``
seconds, after which the server is stopped, which ends every connection; so the run stops by
itself even if the server hangs. Then it stops the server (SIGTERM, which drains overlapped
billing) and counts the billing ledger's rows in the server's SQLite file against the
responses the clients saw complete.

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
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from labkit.api.extensions import TRACES_PATH
from labkit.client.agent import DEFAULT_KEY, TurnRecord, run_rollout
from labkit.paths import default_data_dir
from labkit.scenarios import Scenario, load_scenario
from labkit.server.handle import LabkitServer

DESIGN = "websocket"
MAX_ERRORS_SHOWN = 5


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
    response_ids: list[str] = field(default_factory=list)

    def add(self, records: list[TurnRecord], error: str | None) -> None:
        self.rollouts += 1
        self.responses += len(records)
        self.ttft_s += [r.ttft for r in records if r.ttft is not None]
        self.response_ids += [r.response_id for r in records]
        if error is not None:
            self.errors.append(error)

    def percentile(self, q: int) -> float | None:
        return percentile(self.ttft_s, q)


def percentile(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class RoomResult:
    connections: int
    workers: int
    profile: str
    scenario: str
    single: Phase
    room: Phase
    billing_rows: int = 0  # after the server stopped (and drained its billing queue)
    billing_rows_at_end: int = 0  # when the room's last rollout ended: how far billing lagged
    server_exit: int | None = None  # the server's exit status: negative is a signal (-9: killed)
    peak_rss_kb: dict[int, int] = field(default_factory=dict)  # server pid -> VmHWM
    server_cpu_s: dict[int, float] = field(default_factory=dict)  # server pid -> user + system
    client_cpu_s: float = 0.0  # this process and the test runs it started
    # The room's wait for an engine slot (the server's queue spans): what sizing the engine
    # changes. With several workers only the worker the fetch reaches answers: a sample.
    queue_s: list[float] = field(default_factory=list)

    @property
    def responses(self) -> int:
        return self.single.responses + self.room.responses

    @property
    def errors(self) -> int:
        return len(self.single.errors) + len(self.room.errors)

    @property
    def lost_billing_rows(self) -> int:
        return self.responses - self.billing_rows

    def json(self) -> dict[str, Any]:
        body = asdict(self)
        for phase in ("single", "room"):
            ttft = body[phase].pop("ttft_s")
            body[phase]["ttft_p50_s"] = getattr(self, phase).percentile(50)
            body[phase]["ttft_p99_s"] = getattr(self, phase).percentile(99)
            body[phase]["ttft_samples"] = len(ttft)
        queue = body.pop("queue_s")
        body.update(queue_p50_s=percentile(queue, 50), queue_p99_s=percentile(queue, 99))
        body["queue_samples"] = len(queue)
        for phase in ("single", "room"):
            body[phase].pop("response_ids")
        body.update(responses=self.responses, errors=self.errors, lost_billing_rows=self.lost_billing_rows)
        return body


def play(
    base_url: str, scenario: Scenario, model: str, start: threading.Barrier | None = None
) -> tuple[list[TurnRecord], str | None]:
    """One learner's rollout: the turns that completed, and what went wrong if anything did."""
    records: list[TurnRecord] = []
    try:
        if start is not None:
            start.wait()
        for record in run_rollout(base_url, DESIGN, scenario, model=model):
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
    scenario: str = "fix-failing-test",
    model: str = "labkit-spark",
    single: int = 3,
    deadline_s: float = 600.0,
) -> RoomResult:
    """Start a server, run the single-connection baseline and the room, stop it, count."""
    chosen = load_scenario(scenario, default_data_dir())
    single_phase, room_phase = Phase("single", 1), Phase("room", connections)
    result = RoomResult(connections, workers, profile, chosen.name, single_phase, room_phase)
    cpu_before = _own_cpu_s()
    with LabkitServer(args=["--profile", profile], workers=workers) as server:
        started = time.perf_counter()
        for _ in range(single):
            single_phase.add(*play(server.base_url, chosen, model))
        single_phase.wall_s = time.perf_counter() - started

        start = threading.Barrier(connections, timeout=60)
        started = time.perf_counter()
        with ThreadPoolExecutor(connections, thread_name_prefix="learner") as pool:
            futures = [pool.submit(play, server.base_url, chosen, model, start) for _ in range(connections)]
            done, late = wait(futures, timeout=deadline_s)
            if late:
                # Stopping the server ends every connection, so each late rollout fails and returns.
                _measure_server(server, result)
                server.stop()
            for future in futures:
                records, error = future.result()
                room_phase.add(records, error if future in done else f"past the deadline; {error}")
        room_phase.wall_s = time.perf_counter() - started
        if not late:
            _measure_server(server, result)
            result.queue_s = _queue_waits(server.base_url, room_phase.response_ids)
        result.billing_rows_at_end = _ledger_rows(server.db)
        server.stop()  # SIGTERM: every worker drains its billing queue before it exits
        result.server_exit = server.process.returncode if server.process else None
        result.billing_rows = _ledger_rows(server.db)
    result.client_cpu_s = _own_cpu_s() - cpu_before
    return result


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


def _queue_waits(base_url: str, response_ids: list[str]) -> list[float]:
    """How long each response waited for an engine slot, from the server's spans (one connection,
    so with several workers, the responses of the worker it reached)."""
    waits = []
    headers = {"Authorization": f"Bearer {DEFAULT_KEY}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for response_id in response_ids:
            reply = client.get(TRACES_PATH, params={"response_id": response_id})
            if reply.status_code == 200:
                waits += [s["duration"] for s in reply.json()["data"] if s["stage"] == "queue"]
    return waits


def _own_cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _ledger_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM billing").fetchone()[0]


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
        f"profile {result.profile}, scenario {result.scenario}, model labkit-spark, design {DESIGN}",
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
    errors = result.single.errors + result.room.errors
    rows += [f"error: {e}" for e in errors[:MAX_ERRORS_SHOWN]]
    if len(errors) > MAX_ERRORS_SHOWN:
        rows.append(f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=64, help="learners, each on its own WebSocket")
    parser.add_argument("--workers", type=int, default=1, help="labkit serve --workers")
    parser.add_argument("--profile", default="room", help="labkit serve --profile")
    parser.add_argument("--scenario", default="fix-failing-test", help="a scenario or synthetic:...")
    parser.add_argument("--model", default="labkit-spark")
    parser.add_argument("--single", type=int, default=3, help="baseline rollouts on a single connection")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds the room may take at most")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.workers < 1 or args.single < 1:
        parser.error("--connections, --workers and --single must be 1 or more")
    result = run_room(
        connections=args.connections,
        workers=args.workers,
        profile=args.profile,
        scenario=args.scenario,
        model=args.model,
        single=args.single,
        deadline_s=args.deadline,
    )
    print(json.dumps(result.json(), indent=2) if args.json else format_table(result))


if __name__ == "__main__":
    main()
