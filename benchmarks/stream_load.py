"""Many WebSocket streams at once: does every one keep the model's pace, and what does a delta cost?

Starts ``labkit serve --profile room`` (production-like delays; 4 replicas x 32 sequences, so no
stream waits for the engine) on loopback, then for each case ``STREAMSxTPS`` (default
``64x1000,32x4000``, the model of that decode speed from the catalogue):

1. **single**: ``--single`` streams one after the other, each on its own connection: the baseline.
2. **load**: ``STREAMS`` connections opened, then one ``response.create`` on each at the same
   moment ("Write 3000 tokens.", the generic policy, ``store: false``), then closed.
3. **ceiling**: right after, a bare ``websockets`` server (this file with ``--bare-server``, a
   subprocess on loopback, a few lines: no ASGI, no pipeline, one f-string per frame) sends each
   of ``STREAMS`` new connections as many frames as labkit sent per stream in step 2, of the same
   mean size, on a deadline schedule over the same ideal duration (tokens / tps).

Steps 2 and 3 run ``--rounds`` times, alternately, so each round's ratio compares two phases run
back to back on the same machine.

The clients are raw ``websockets`` asyncio connections in this process, one per stream, that only
timestamp frames (a delta is recognised by its first bytes; only the first delta and the terminal
event are parsed). Per stream:

- **rate**: the tokens after the first delta (``usage.output_tokens`` minus the first delta's
  tokens) over the time from the first to the last delta, as ``decode_pacing.py`` measures it;
- **TTFT**: from sending the create to the first delta.

**Server CPU per delta**: the server process's ``utime + stime`` (``/proc/<pid>/stat``) over the
load phase, divided by the delta events it sent; everything else the server does in that phase
(the creates, the other events, the connections' idle time) is charged to the deltas too. The
ceiling's CPU per frame is read the same way from the bare server, and **ratio** is the one over
the other (opening and closing the connections is in both phases). The table gives the median
round's CPU figures and ratio, and the pace and TTFT of every stream of every round. Client and
servers share the machine (on 2 cores the clients' CPU is the server's competition); the
clients' CPU per frame is printed for that reason.

    python benchmarks/stream_load.py                        # 64 x 1,000 tokens/s and 32 x 4,000
    python benchmarks/stream_load.py --cases 16x1000 --tokens 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from labkit.api.event_types import ERROR, OUTPUT_TEXT_DELTA, RESPONSE_CREATE, TERMINAL_EVENT
from labkit.client.launcher import LabkitServer
from labkit.client.room import DEFAULT_KEY
from labkit.engine.catalogue import load_catalogue
from labkit.text.tokenizer import encode_text

# Frames are told apart by how they begin (the server writes "type" first, compactly), so the
# deltas that make up nearly every frame are not parsed.
DELTA_PREFIX = f'{{"type":"{OUTPUT_TEXT_DELTA}"'
TERMINAL_PREFIXES = tuple(f'{{"type":"{TERMINAL_EVENT[status]}"' for status in ("completed", "incomplete"))
ERROR_PREFIX = f'{{"type":"{ERROR}"'
HEADERS = {"Authorization": f"Bearer {DEFAULT_KEY}"}
PACE_TOLERANCE = 0.05  # the target: every stream within 5% of the configured rate


@dataclass
class Stream:
    """What one client saw of one stream."""

    sent: float = 0.0
    arrivals: list[float] = field(default_factory=list)  # each delta's arrival
    frame_chars: int = 0  # the delta frames' characters, together
    first_tokens: int = 0  # tokens in the first delta
    output_tokens: int = 0

    @property
    def ttft(self) -> float:
        return self.arrivals[0] - self.sent

    @property
    def rate(self) -> float:
        span = self.arrivals[-1] - self.arrivals[0]
        return (self.output_tokens - self.first_tokens) / span if span > 0 else float("nan")


@dataclass
class Round:
    """One load phase and its ceiling, measured side by side."""

    load: list[Stream]
    server_cpu_s: float  # labkit's, over the load phase
    client_cpu_s: float  # this process's, over the load phase
    bare_frames: int = 0
    bare_frame_chars: int = 0
    bare_cpu_s: float = 0.0
    bare_client_cpu_s: float = 0.0

    @property
    def deltas(self) -> int:
        return sum(len(s.arrivals) for s in self.load)

    @property
    def cpu_per_delta(self) -> float:
        return self.server_cpu_s / self.deltas

    @property
    def bare_cpu_per_frame(self) -> float:
        return self.bare_cpu_s / self.bare_frames


@dataclass
class Case:
    streams: int
    tps: float
    model: str
    tokens: int
    single: list[Stream] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Pace and TTFT over every stream of every round; CPU figures: the median round's."""
        load = [s for r in self.rounds for s in r.load]
        rates = sorted(s.rate for s in load)
        deltas = sum(r.deltas for r in self.rounds)

        def median(values: list[float]) -> float:
            return statistics.median(values)

        return {
            "streams": self.streams,
            "tps": self.tps,
            "model": self.model,
            "tokens": self.tokens,
            "rounds": len(self.rounds),
            "rate_slowest": rates[0],
            "rate_median": median(rates),
            "rate_fastest": rates[-1],
            "slowest_error": rates[0] / self.tps - 1,
            "median_error": median(rates) / self.tps - 1,
            "on_pace": sum(r >= (1 - PACE_TOLERANCE) * self.tps for r in rates),
            "measured_streams": len(rates),
            "single_rate": median([s.rate for s in self.single]),
            "ttft_p50_s": percentile([s.ttft for s in load], 50),
            "ttft_p99_s": percentile([s.ttft for s in load], 99),
            "single_ttft_p50_s": percentile([s.ttft for s in self.single], 50),
            "single_ttft_p99_s": percentile([s.ttft for s in self.single], 99),
            "deltas_per_stream": deltas / len(load),
            "tokens_per_delta": sum(s.output_tokens for s in load) / deltas,
            "delta_frame_chars": sum(s.frame_chars for s in load) / deltas,
            "server_cpu_s": median([r.server_cpu_s for r in self.rounds]),
            "server_cpu_per_delta_us": median([r.cpu_per_delta for r in self.rounds]) * 1e6,
            "client_cpu_per_delta_us": median([r.client_cpu_s / r.deltas for r in self.rounds]) * 1e6,
            "bare_frames": median([r.bare_frames for r in self.rounds]),
            "bare_frame_chars": median([r.bare_frame_chars / r.bare_frames for r in self.rounds]),
            "bare_cpu_s": median([r.bare_cpu_s for r in self.rounds]),
            "bare_cpu_per_frame_us": median([r.bare_cpu_per_frame for r in self.rounds]) * 1e6,
            "bare_client_cpu_per_frame_us": median([r.bare_client_cpu_s / r.bare_frames for r in self.rounds])
            * 1e6,
            # Each round's ratio is of two phases run back to back; the median of those.
            "ceiling_ratio": median([r.cpu_per_delta / r.bare_cpu_per_frame for r in self.rounds]),
            "ceiling_ratios": [r.cpu_per_delta / r.bare_cpu_per_frame for r in self.rounds],
        }


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def process_cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


# ---------------------------------------------------------------- labkit streams


async def open_socket(url: str) -> ClientConnection:
    return await connect(url, additional_headers=HEADERS, max_size=None, open_timeout=60, ping_interval=None)


async def labkit_stream(ws: ClientConnection, model: str, tokens: int, start: asyncio.Event) -> Stream:
    """One ``response.create`` on an open socket; timestamps every delta until the terminal event."""
    create = json.dumps(
        {
            "type": RESPONSE_CREATE,
            "model": model,
            "input": f"Write {tokens} tokens.",
            "max_output_tokens": tokens,
            "store": False,
        }
    )
    await start.wait()
    seen = Stream(sent=time.perf_counter())
    await ws.send(create)
    async for message in ws:
        stamp = time.perf_counter()
        assert isinstance(message, str)
        if message.startswith(DELTA_PREFIX):
            if not seen.arrivals:
                seen.first_tokens = len(encode_text(json.loads(message)["delta"]))
            seen.arrivals.append(stamp)
            seen.frame_chars += len(message)
        elif message.startswith(TERMINAL_PREFIXES):
            seen.output_tokens = json.loads(message)["response"]["usage"]["output_tokens"]
            return seen
        elif message.startswith(ERROR_PREFIX):
            raise RuntimeError(message[:300])
    raise RuntimeError("the server closed the stream before its terminal event")


async def run_streams(url: str, count: int, model: str, tokens: int, deadline_s: float) -> list[Stream]:
    sockets = await asyncio.gather(*(open_socket(url) for _ in range(count)))
    start = asyncio.Event()
    try:
        tasks = [asyncio.create_task(labkit_stream(ws, model, tokens, start)) for ws in sockets]
        await asyncio.sleep(0.2)  # every task waits on the event: they all send at once
        start.set()
        return list(await asyncio.wait_for(asyncio.gather(*tasks), deadline_s))
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)


# ---------------------------------------------------------------- the ceiling: a bare websockets server

FRAME_HEAD = (
    DELTA_PREFIX
    + ',"item_id":"msg_0123456789abcdef0123456789abcd","output_index":0,"content_index":0,"delta":"'
)
FRAME_TAIL = '","logprobs":[],"sequence_number":'
PROSE = (
    "The service's cost per turn stopped growing with the conversation once the socket kept "
    "the previous response in memory; what is left is the work on what is new. "
) * 8


def bare_frame(index: int, chars: int) -> str:
    """A delta-like JSON frame of about ``chars`` characters, its text varying frame to frame."""
    tail = f"{FRAME_TAIL}{index}}}"
    room = max(1, chars - len(FRAME_HEAD) - len(tail))
    offset = (index * 37) % (len(PROSE) - room) if room < len(PROSE) else 0
    return FRAME_HEAD + PROSE[offset : offset + room] + tail


async def bare_server() -> None:
    """Per connection: read ``{"frames", "chars", "seconds"}``, send the frames on a deadline
    schedule (frame i at t0 + (i+1) * seconds / frames), then ``{"type":"done"}``."""
    from websockets.asyncio.server import ServerConnection, serve

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            ask = json.loads(raw)
            frames, chars, seconds = int(ask["frames"]), int(ask["chars"]), float(ask["seconds"])
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i in range(frames):
                wait = t0 + (i + 1) * seconds / frames - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await ws.send(bare_frame(i, chars))
            await ws.send('{"type":"done"}')

    async with serve(handler, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"bare server on ws://127.0.0.1:{port}", flush=True)
        await asyncio.Future()


async def bare_stream(ws: ClientConnection, ask: str, start: asyncio.Event) -> tuple[int, int]:
    await start.wait()
    await ws.send(ask)
    frames = chars = 0
    async for message in ws:
        if message == '{"type":"done"}':
            return frames, chars
        frames, chars = frames + 1, chars + len(message)
    raise RuntimeError("the bare server closed the stream early")


async def run_bare(url: str, count: int, frames: int, chars: int, seconds: float) -> tuple[int, int]:
    sockets = await asyncio.gather(*(open_socket(url) for _ in range(count)))
    ask = json.dumps({"frames": frames, "chars": chars, "seconds": seconds})
    start = asyncio.Event()
    try:
        tasks = [asyncio.create_task(bare_stream(ws, ask, start)) for ws in sockets]
        await asyncio.sleep(0.2)
        start.set()
        done = await asyncio.wait_for(asyncio.gather(*tasks), seconds * 10 + 60)
        return sum(f for f, _ in done), sum(c for _, c in done)
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)


class BareServer:
    """The ceiling's server, in a subprocess of its own."""

    def __enter__(self) -> BareServer:
        cmd = [sys.executable, __file__, "--bare-server"]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("bare server on "):
            self.process.kill()
            raise RuntimeError(f"the bare server did not start: {line!r}")
        self.url = line.split()[-1]
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


# ---------------------------------------------------------------- a run


def measure(
    case: Case, server: LabkitServer, bare: BareServer, single: int, rounds: int, deadline_s: float
) -> None:
    """The single streams, then ``rounds`` times: the load on labkit, then the same frames from
    the bare server (so each ratio compares two phases run back to back)."""
    assert server.process is not None
    url = server.ws_url
    for _ in range(single):
        case.single += asyncio.run(run_streams(url, 1, case.model, case.tokens, deadline_s))
    for _ in range(rounds):
        cpu, own = process_cpu_s(server.process.pid), own_cpu_s()
        load = asyncio.run(run_streams(url, case.streams, case.model, case.tokens, deadline_s))
        done = Round(load, process_cpu_s(server.process.pid) - cpu, own_cpu_s() - own)
        frames = round(done.deltas / case.streams)
        chars = round(sum(s.frame_chars for s in load) / done.deltas)
        cpu, own = process_cpu_s(bare.process.pid), own_cpu_s()
        done.bare_frames, done.bare_frame_chars = asyncio.run(
            run_bare(bare.url, case.streams, frames, chars, case.tokens / case.tps)
        )
        done.bare_cpu_s = process_cpu_s(bare.process.pid) - cpu
        done.bare_client_cpu_s = own_cpu_s() - own
        case.rounds.append(done)


def model_for(tps: float) -> str:
    for name, spec in load_catalogue().models.items():
        if spec.decode_tps == tps:
            return name
    raise SystemExit(f"no model in the catalogue decodes at {tps:g} tokens/s")


def format_rows(rows: list[dict[str, Any]]) -> str:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:,.0f} ms"

    lines = [
        "| streams | tokens/s | slowest | median | on pace (±5%) | p50 TTFT (single) | p99 TTFT (single) "
        "| tokens/delta | server CPU/delta | bare CPU/frame | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {r['tps']:,.0f} | {r['rate_slowest']:,.0f} ({r['slowest_error']:+.1%}) "
            f"| {r['rate_median']:,.0f} ({r['median_error']:+.1%}) | {r['on_pace']}/{r['measured_streams']} "
            f"| {ms(r['ttft_p50_s'])} ({ms(r['single_ttft_p50_s'])}) "
            f"| {ms(r['ttft_p99_s'])} ({ms(r['single_ttft_p99_s'])}) "
            f"| {r['tokens_per_delta']:.1f} | {r['server_cpu_per_delta_us']:.0f} µs "
            f"| {r['bare_cpu_per_frame_us']:.0f} µs | {r['ceiling_ratio']:.2f}x |"
        )
    lines.append("")
    for r in rows:
        lines.append(
            f"{r['streams']} x {r['tps']:,.0f} tokens/s ({r['model']}, {r['tokens']:,} tokens, "
            f"{r['rounds']} rounds; ratios {', '.join(f'{x:.2f}' for x in r['ceiling_ratios'])}): "
            f"{r['deltas_per_stream']:.0f} deltas per stream of {r['delta_frame_chars']:.0f} chars; "
            f"server {r['server_cpu_s']:.2f} CPU-s; bare server {r['bare_frames']:,.0f} frames of "
            f"{r['bare_frame_chars']:.0f} chars, {r['bare_cpu_s']:.2f} CPU-s; "
            f"client CPU per delta {r['client_cpu_per_delta_us']:.0f} µs "
            f"(bare {r['bare_client_cpu_per_frame_us']:.0f} µs); "
            f"single stream {r['single_rate']:,.0f} tokens/s"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--cases", default="64x1000,32x4000", help="STREAMSxTPS, comma-separated")
    parser.add_argument("--tokens", type=int, default=3000, help="output tokens per stream")
    parser.add_argument("--profile", default="room", help="labkit serve --profile")
    parser.add_argument("--single", type=int, default=3, help="baseline streams, one at a time")
    parser.add_argument("--rounds", type=int, default=3, help="load phases (each with its ceiling)")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds a phase may take at most")
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        asyncio.run(bare_server())
        return
    cases = []
    for spec in args.cases.split(","):
        streams, tps = spec.lower().split("x")
        cases.append(Case(int(streams), float(tps), model_for(float(tps)), args.tokens))
    encode_text("warm up the tokenizer")
    with LabkitServer(args=["--profile", args.profile]) as server, BareServer() as bare:
        asyncio.run(run_streams(server.ws_url, 2, cases[0].model, 200, args.deadline))  # warm up
        asyncio.run(run_bare(bare.url, 2, 10, 200, 0.05))
        for case in cases:
            measure(case, server, bare, args.single, args.rounds, args.deadline)
            print(f"  {case.streams} x {case.tps:,.0f} tokens/s measured", file=sys.stderr)
    rows = [case.summary() for case in cases]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_rows(rows))


if __name__ == "__main__":
    main()
