"""What a flood of held frames costs the server in memory: its RSS growth on a second flood, as a
share of the bytes the flood sent.

Starts ``labkit serve --profile local`` on loopback, opens one WebSocket connection on the
multi-agent beta's wire (the appended design), starts a long rollout on each of ``--lanes`` lanes
and hands each ``--injects`` injects of ``--inject-chars`` characters while they decode, so none is
taken: every frame is held, or refused once the connection's bound (16 MiB) is full
(``labkit.server.wscore.held_bytes``). It floods twice. The first flood fills the bound and leaves
the allocator what it freed; the second is refused whole, so the server's RSS growth over it is
what a refused flood costs. The old server held every frame (half a gigabyte for 16 lanes × 16
injects of 1.9 MB, twice that as Python objects); the figure to watch is the growth over the
second flood against the bytes it sent, and whether it stays under one half. How much the
allocator keeps meanwhile varies with the machine's load, which is why this is a benchmark and
the test (``tests/server/wscore/test_held_bytes.py``) checks only what is held and refused.

Every run starts its own server; the rollouts are stopped with it. Linux only (/proc).

    python benchmarks/held_bytes.py
    python benchmarks/held_bytes.py --repeat 3
    python benchmarks/held_bytes.py --lanes 4 --injects 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from labkit.api.extensions import DESIGN_HEADER
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.client.launcher import LabkitServer

BETA = {BETA_HEADER: MULTI_AGENT_BETA, DESIGN_HEADER: "appended"}
HEADERS = {"Authorization": "Bearer sk-labkit-bench", **BETA}
LONG = "Write 30000 tokens."  # a rollout that decodes for minutes at labkit-classic's pace
RECV_TIMEOUT_S = 60.0  # a frame the server owes the client arrives within this, or the run fails
SHARE_LIMIT = 0.5  # the bound the figure is held to: under half of what a flood sends


def rss_kb(pid: int) -> int:
    """A process's resident set, in KiB, from /proc (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def rollouts(ws: ClientConnection, lanes: int) -> list[str]:
    """Start a long rollout on each of ``lanes`` lanes; their response ids once created."""
    for lane in range(lanes):
        create = {"type": "response.create", "model": "labkit-classic", "input": LONG, "store": False}
        ws.send(json.dumps({**create, "stream_id": f"lane-{lane}"}))
    created: list[str] = []
    while len(created) < lanes:
        event = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        if event["type"] == "error":
            raise RuntimeError(f"a rollout was refused: {event}")
        if event["type"] == "response.created":
            created.append(event["response"]["id"])
    return created


def inject(response_id: str, chars: int) -> str:
    """A ``response.inject`` frame handing ``response_id`` a user message of ``chars`` characters."""
    message = {"type": "message", "role": "user", "content": "y" * chars}
    return json.dumps({"type": "response.inject", "response_id": response_id, "input": [message]})


def answer_to_marker(ws: ClientConnection) -> list[dict[str, Any]]:
    """Send a frame every connection answers (an unknown type), and return the refusals that came
    before its answer: the frames sent before it were all handled by then, in order."""
    ws.send(json.dumps({"type": "marker"}))
    refusals = []
    while True:
        event = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        if event["type"] == "error" and event["error"]["code"] == "unknown_event":
            return refusals
        if event["type"] == "error":
            refusals.append(event)


def flood(ws: ClientConnection, ids: list[str], injects: int, chars: int) -> tuple[int, list[dict[str, Any]]]:
    """Hand every rollout ``injects`` injects of ``chars``: the bytes sent, and the refusals once
    all were handled."""
    sent = 0
    for response_id in ids:
        frame = inject(response_id, chars)
        for _ in range(injects):
            ws.send(frame)
            sent += len(frame)
    return sent, answer_to_marker(ws)


def run(lanes: int, injects: int, chars: int) -> dict[str, Any]:
    """One server, two floods: what each held and refused, and the RSS growth over the second."""
    with LabkitServer(args=["--profile", "local"]) as server:
        # max_queue=None: the rollouts' deltas are read while the client floods, so the server never
        # waits on a client that stopped reading.
        ws = connect(server.ws_url, additional_headers=HEADERS, max_size=None, max_queue=None)
        with ws:
            ids = rollouts(ws, lanes)
            pid = server.processes()[0]
            start = rss_kb(pid)
            sent, first = flood(ws, ids, injects, chars)
            before = rss_kb(pid)
            _, second = flood(ws, ids, injects, chars)
            grown_kb = rss_kb(pid) - before
    frames, refused_first, refused_second = lanes * injects, len(first), len(second)
    share = grown_kb * 1024 / sent
    return {
        "frames_per_flood": frames,
        "bytes_per_flood": sent,
        "held_first": frames - refused_first,
        "refused_first": refused_first,
        "refused_second": refused_second,
        "rss_start_kb": start,
        "grown_first_kb": before - start,
        "grown_second_kb": grown_kb,
        "share_of_sent": share,
        "under_half": share < SHARE_LIMIT,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=16, help="rollouts on the connection (≤ 16)")
    parser.add_argument("--injects", type=int, default=16, help="injects handed to each rollout per flood")
    parser.add_argument("--inject-chars", type=int, default=1_900_000, help="an inject's text (< 2 MiB)")
    parser.add_argument("--repeat", type=int, default=1, help="runs, each on a server of its own")
    parser.add_argument("--json", action="store_true", help="print every run as JSON")
    args = parser.parse_args(argv)
    runs = [run(args.lanes, args.injects, args.inject_chars) for _ in range(args.repeat)]
    if args.json:
        print(json.dumps(runs))
        return
    first = runs[0]
    print(
        f"{args.lanes} lanes x {args.injects} injects of {args.inject_chars:,} characters: "
        f"{first['bytes_per_flood'] / 2**20:,.0f} MiB a flood; {os.cpu_count()} cores"
    )
    print(
        "\n| run | held (first flood) | refused: first, second | RSS at start "
        "| grown: first flood | second | second / sent | under one half |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for number, r in enumerate(runs, 1):
        held = f"{r['held_first']} of {r['frames_per_flood']}"
        refused = f"{r['refused_first']}, {r['refused_second']}"
        under = "yes" if r["under_half"] else "no"
        print(
            f"| {number} | {held} | {refused} | {r['rss_start_kb'] / 1024:,.0f} MiB "
            f"| {r['grown_first_kb'] / 1024:,.1f} MiB | {r['grown_second_kb'] / 1024:,.1f} MiB "
            f"| {r['share_of_sent']:.3f} | {under} |"
        )


if __name__ == "__main__":
    main()
