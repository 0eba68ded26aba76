"""Real CPU work per unit (tokenizing, scanning, the SDK building a request), measured here.

The cost model (``labkit.analysis.cost_model``) prices a rollout's real CPU work with these:
``CpuCosts()`` holds a guess, ``CpuCosts.measure()`` times the work on this machine (about a
second), ``CpuCosts.scaled`` prices it on a slower or faster one.

>>> CpuCosts().scaled(2).fixed_s_per_turn
0.004
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from labkit.engine import timing
from labkit.engine.safety import scan
from labkit.paths import builtin_data_dir
from labkit.text.passage import text_of_tokens
from labkit.text.tokenizer import encode_text

if TYPE_CHECKING:
    import httpx
    from openai import OpenAI


NOT_CPU_WORK = ("timer_overrun_s",)  # ``CpuCosts`` fields that a faster CPU does not shorten
# The code tokenized and scanned: a module of the sample repository (about 1.3k tokens of Python).
SAMPLE_CODE = builtin_data_dir() / "sample_repo" / "tally" / "invoice.py"


@dataclass(frozen=True)
class CpuCosts:
    """Real CPU work per unit, as measured on this machine (seconds); the defaults are a guess.

    >>> round(CpuCosts().scan_s_per_token * 1e6, 3)  # ms per 1k tokens scanned, by default
    0.4
    """

    tokenize_s_per_token: float = 0.25e-6  # tiktoken on code and prose
    scan_s_per_token: float = 0.4e-6  # a classifier scan: tokenize plus pattern matching
    client_s_per_sent_item: float = 0.25e-3  # the SDK preparing a request, per input item
    client_s_per_sent_token: float = 0.05e-6  # ... and per token of input
    fixed_s_per_turn: float = 0.002  # request parsing, event framing and bookkeeping, both ends
    http_request_s: float = 0.002  # the SDK preparing one HTTP request: settings, tools, instructions
    ws_request_s: float = 0.003  # ... one response.create event for WebSocket mode
    # The SDK sending response.inject as its own event object (the appended design's later
    # turns, as labkit's client sends it): a small model to validate, no settings to build.
    inject_s: float = 0.0001
    inject_s_per_item: float = 0.00006
    timer_overrun_s: float = 0.0005  # how late a server's asyncio sleep wakes, on average

    @classmethod
    def measure(cls) -> CpuCosts:
        """Time the real work on this machine (about a second): tokenizing and scanning
        source code, the official SDK preparing requests (one item; many small or few large
        items) over HTTP and WebSocket mode and an inject (one item, then six), and how late
        a short asyncio sleep wakes up."""
        text = SAMPLE_CODE.read_text(encoding="utf-8")
        tokens = len(encode_text(text))
        tokenize, scanning = _per_token(
            {"tokenize": lambda: encode_text(text), "scan": lambda: scan([text])}, tokens
        ).values()
        base, ws_base = _request_seconds(1, 10), _request_seconds(1, 10, websocket=True)
        short = _request_seconds(items=20, tokens_each=10)
        many = _request_seconds(items=120, tokens_each=10)
        long = _request_seconds(items=20, tokens_each=1000)
        # request = r + items * a + tokens * b: more items of the same size give a, longer ones b
        per_item = max(0.0, (many - short) / 100)
        per_token = max(0.0, (long - short) / (20 * 990))
        one, six = _inject_seconds(1), _inject_seconds(6)
        per_injected = max(0.0, (six - one) / 5)
        return cls(
            tokenize_s_per_token=tokenize,
            scan_s_per_token=scanning,
            client_s_per_sent_item=per_item,
            client_s_per_sent_token=per_token,
            http_request_s=max(0.0, base - per_item - 10 * per_token),
            ws_request_s=max(0.0, ws_base - per_item - 10 * per_token),
            inject_s=max(0.0, one - per_injected - 10 * per_token),
            inject_s_per_item=per_injected,
            timer_overrun_s=_timer_overrun(),
        )

    @property
    def per_1k_ms(self) -> float:
        """This machine's CPU cost per 1k tokens, in ms: scanning them plus tokenizing them, the
        work a classifier and a renderer do over every token of a history. The one number
        ``labkit doctor`` and the notebooks print for a CPU (its parts, ``summary``).

        >>> round(CpuCosts().per_1k_ms, 2)
        0.65
        """
        return (self.scan_s_per_token + self.tokenize_s_per_token) * 1e6

    def per_1k_shown(self) -> str:
        """``per_1k_ms`` with its parts, as ``labkit doctor`` and every notebook print it.

        >>> CpuCosts().per_1k_shown()
        '0.65 ms per 1k tokens (scanning 0.40 + tokenizing 0.25)'
        """
        scan_ms, tokenize_ms = self.scan_s_per_token * 1e6, self.tokenize_s_per_token * 1e6
        parts = f"scanning {scan_ms:.2f} + tokenizing {tokenize_ms:.2f}"
        return f"{self.per_1k_ms:.2f} ms per 1k tokens ({parts})"

    def summary(self) -> str:
        """The CPU in one line, as every notebook prints it.

        >>> CpuCosts().summary()
        'CPU: 0.65 ms per 1k tokens (scanning 0.40 + tokenizing 0.25)'
        """
        return f"CPU: {self.per_1k_shown()}"

    def scaled(self, factor: float) -> CpuCosts:
        """The same work on a machine ``factor`` times slower: every CPU cost times ``factor``;
        how late a timer wakes is the operating system's, and stays.

        >>> slow = CpuCosts().scaled(2)
        >>> round(slow.scan_s_per_token * 1e6, 3), slow.timer_overrun_s == CpuCosts().timer_overrun_s
        (0.8, True)
        """
        if factor <= 0:
            raise ValueError(f"a CPU factor must be positive, not {factor}")
        work = {f.name: getattr(self, f.name) * factor for f in fields(self) if f.name not in NOT_CPU_WORK}
        return replace(self, **work)


def _per_unit(work: Callable[[], object], units: int, repeat: int = 5) -> float:
    """The fastest of ``repeat`` timings of ``work`` on this thread's CPU clock, per unit.

    What the work costs the CPU, whatever else runs: a wall clock on a busy laptop stretched the
    same work threefold from one notebook to the next, while the time this thread spent on a
    core does not count the waits for one (the lab's *CPU time ×* stands for a slower machine).
    Of several runs the fastest is the one least disturbed by caches and page faults. Garbage
    collection stays on: it is part of the work's cost.
    """
    work()
    times = []
    for _ in range(repeat):
        start = _cpu_clock()
        work()
        times.append(_cpu_clock() - start)
    return min(times) / units


ROUNDS = 31  # timings of each per-token work; the fastest counts
PAUSE_S = 0.002  # between rounds: the timings spread over a tenth of a second, not one burst


def _per_token(works: dict[str, Callable[[], object]], tokens: int) -> dict[str, float]:
    """The fastest of ``ROUNDS`` timings of each work (over ``tokens`` tokens) on this thread's CPU
    clock, per token, the works taking turns round by round with a short pause between rounds.

    Why in rounds: a sibling hyperthread that another program keeps busy (a browser drawing a
    notebook, on a laptop that shares each core between two threads) slows a thread's own CPU
    time too, in bursts. Timings spread out in time meet a quiet moment where a run of
    consecutive ones may fall inside a burst; the fastest round is the work's own cost.
    """
    for work in works.values():
        work()  # warm: the first call pays for caches the others find filled
    best = dict.fromkeys(works, float("inf"))
    for _ in range(ROUNDS):
        for name, work in works.items():
            start = _cpu_clock()
            work()
            best[name] = min(best[name], _cpu_clock() - start)
        time.sleep(PAUSE_S)
    return {name: seconds / tokens for name, seconds in best.items()}


def _cpu_clock() -> float:
    """This thread's CPU time where the system counts it finely, else the wall clock.

    Windows counts a thread's CPU time in scheduler ticks of 15.6 ms, far coarser than the
    millisecond of work timed here: there the wall clock's fastest run stands in for it.
    """
    return time.perf_counter() if sys.platform == "win32" else time.thread_time()


def _request_seconds(items: int, tokens_each: int, *, websocket: bool = False) -> float:
    """What the official SDK spends sending a request (the agent's tools, 8k tokens of
    instructions, an input list): ``responses.create`` over HTTP, through a transport that
    answers at once, or ``response.create`` in WebSocket mode, to a loopback socket that
    discards it."""
    from labkit.client.tools import TOOL_SPECS

    history = [
        {"type": "function_call_output", "call_id": f"call_{i}", "output": text_of_tokens(tokens_each)}
        for i in range(items)
    ]
    body: dict[str, Any] = {
        "model": "m",
        "input": history,
        "instructions": text_of_tokens(8000),
        "tools": TOOL_SPECS,
    }
    if websocket:
        with _discarding_socket() as base_url, _sdk(base_url).responses.connect() as conn:
            return _per_unit(lambda: conn.response.create(**body), 1)
    import httpx

    client = _sdk("http://127.0.0.1:9/v1", httpx.MockTransport(_empty_stream))
    try:
        return _per_unit(lambda: client.responses.create(stream=True, **body).close(), 1)
    finally:
        client.close()


def _inject_seconds(items: int) -> float:
    """What the official SDK spends sending ``response.inject`` (the multi-agent beta) with
    ``items`` short tool outputs as labkit's client does, as the SDK's event object, to a
    loopback socket that discards it."""
    from openai.types.beta.beta_response_inject_event import BetaResponseInjectEvent

    outputs = [
        {"type": "function_call_output", "call_id": f"call_{i}", "output": text_of_tokens(10)}
        for i in range(items)
    ]
    with _discarding_socket() as base_url, _sdk(base_url).beta.responses.connect() as conn:
        return _per_unit(
            lambda: conn.send(
                BetaResponseInjectEvent(type="response.inject", response_id="r", input=outputs)
            ),
            1,
        )


def _sdk(base_url: str, transport: httpx.BaseTransport | None = None) -> OpenAI:
    import httpx
    from openai import OpenAI

    http = httpx.Client(transport=transport) if transport else None
    return OpenAI(base_url=base_url, api_key="measure", max_retries=0, http_client=http)


def _empty_stream(request: httpx.Request) -> httpx.Response:
    """An SSE answer with no events: the SDK's cost ends where the network's would begin."""
    import httpx

    request.read()
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")


@contextmanager
def _discarding_socket() -> Iterator[str]:
    """A WebSocket server on loopback that reads and drops every frame; yields its base URL."""
    from websockets.sync.server import ServerConnection, serve

    def drop(ws: ServerConnection) -> None:
        for _ in ws:
            pass

    with serve(drop, "127.0.0.1", 0, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/v1"
        finally:
            server.shutdown()
            thread.join()


def _timer_overrun(sleeps: int = 20, seconds: float = 0.002) -> float:
    """How late a modeled delay wakes on this machine, on average: the server's own sleep
    (``labkit.engine.timing.sleep``), measured after it has calibrated to this timer."""

    async def late() -> float:
        await timing.calibrate()
        total = 0.0
        for _ in range(sleeps):
            start = time.perf_counter()
            await timing.sleep(seconds)
            total += time.perf_counter() - start - seconds
        return total / sleeps

    # A thread of its own: in a notebook, the caller's thread already runs an event loop.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return max(0.0, pool.submit(asyncio.run, late()).result())
