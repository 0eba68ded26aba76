"""The analytic cost model: per-turn and end-to-end time of each design, instantly, from inputs.

It adds up, turn by turn, what each stage of the pipeline costs under a
design: the profile's modeled delays (hops, round trips, classifier cost per
token), the model's prefill and decode time, the client's tools, and the
real CPU work, estimated from per-token costs measured on this machine
(``CpuCosts.measure``). It runs nothing on a server, so a what-if slider can
call it hundreds of times a second; ``benchmarks/cost_model.py`` checks it
against measured rollouts.

The scenario enters as a ``Shape``: per turn, the tokens of the new input
items, of the output, and the seconds of client tools.

Two inputs describe a machine or a network rather than a design:
``CpuCosts.scaled`` prices the CPU work on a slower (or faster) machine, and
``reconnects`` names the turns on which a WebSocket client found its
connection gone and opened a new one.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from labkit.api.ids import new_id
from labkit.api.stages import ClientStep, Stage, bucket_of
from labkit.designs import Design, Over, Runs, Step, compose
from labkit.engine import timing
from labkit.engine.policies import Call, Say, ScriptedPolicy, text_of_tokens
from labkit.engine.render import encode_block, item_block, system_block
from labkit.engine.tokenizer import encode_text
from labkit.scenarios import Scenario
from labkit.server.profiles import Profile

if TYPE_CHECKING:
    import httpx
    import pandas as pd
    from openai import OpenAI


@dataclass(frozen=True)
class TurnShape:
    new_tokens: int  # rendered tokens of the items the client adds this turn
    new_items: int
    output_items: int
    output_tokens: int  # sampled tokens of the model's output
    output_block_tokens: int  # the output as rendered into the history (headers and markup too)
    tool_s: float = 0.0  # client time running the tools this turn calls


@dataclass(frozen=True)
class Shape:
    """A rollout's sizes: the system block, then each turn's new input and output.

    >>> from labkit.scenarios import synthetic
    >>> [t.output_items for t in Shape.of(synthetic(turns=3)).turns]
    [1, 1, 1]
    """

    system_tokens: int
    turns: tuple[TurnShape, ...]

    @classmethod
    def of(cls, scenario: Scenario) -> Shape:
        """The shape of a scenario's rollout.

        The tools really run: synthetic scenarios return their fixed size, file
        scenarios replay their calls on a sandbox copy (real tools, real outputs).
        """
        from labkit.client.agent import Toolbox

        tools = Toolbox(scenario)
        try:
            system = len(encode_block(*system_block(scenario.instructions, tools.specs)))
            policy = ScriptedPolicy.from_steps(scenario.steps)
            turns, new_items = [], [{"type": "message", "role": "user", "content": scenario.user}]
            for actions in policy.steps:
                outputs = [_output_item(a) for a in actions]
                calls = [o for o in outputs if o["type"] == "function_call"]
                out_tokens = sum(len(encode_text(item_block(i)[1])) for i in outputs)
                start = time.perf_counter()
                results = [tools.run(c["name"], c["arguments"]) for c in calls]
                tool_s = time.perf_counter() - start
                turns.append(
                    TurnShape(
                        new_tokens=sum(len(encode_block(*item_block(i))) for i in new_items),
                        new_items=len(new_items),
                        output_items=len(outputs),
                        output_tokens=out_tokens,
                        output_block_tokens=sum(len(encode_block(*item_block(i))) for i in outputs),
                        tool_s=tool_s,
                    )
                )
                new_items = [
                    {"type": "function_call_output", "call_id": c["call_id"], "output": r}
                    for c, r in zip(calls, results, strict=True)
                ]
            return cls(system, tuple(turns))
        finally:
            tools.close()


def _output_item(action: Say | Call) -> dict:
    """The output item an action becomes, with ids of the server's length."""
    if isinstance(action, Call):
        call_id = new_id("call")
        return {
            "type": "function_call",
            "name": action.name,
            "call_id": call_id,
            "arguments": action.arguments,
        }
    return {"type": "message", "role": "assistant", "content": action.text}


NOT_CPU_WORK = ("timer_overrun_s",)  # ``CpuCosts`` fields that a faster CPU does not shorten


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
    timer_overrun_s: float = 0.0005  # how late a server's asyncio sleep wakes, on average

    @classmethod
    def measure(cls) -> CpuCosts:
        """Time the real work on this machine (about half a second): tokenizing and scanning
        source code, the official SDK preparing requests (one item; many small or few large
        items) over HTTP and WebSocket mode, and how late a short asyncio sleep wakes up."""
        from labkit.server import pipeline
        from labkit.server.safety import scan

        text = Path(pipeline.__file__).read_text()
        tokens = len(encode_text(text))
        tokenize = _per_unit(lambda: encode_text(text), tokens)
        scanning = _per_unit(lambda: scan([text]), tokens)
        base, ws_base = _request_seconds(1, 10), _request_seconds(1, 10, websocket=True)
        short = _request_seconds(items=20, tokens_each=10)
        many = _request_seconds(items=200, tokens_each=10)
        long = _request_seconds(items=20, tokens_each=1000)
        # request = r + items * a + tokens * b: more items of the same size give a, longer ones b
        per_item = max(0.0, (many - short) / 180)
        per_token = max(0.0, (long - short) / (20 * 990))
        return cls(
            tokenize_s_per_token=tokenize,
            scan_s_per_token=scanning,
            client_s_per_sent_item=per_item,
            client_s_per_sent_token=per_token,
            http_request_s=max(0.0, base - per_item - 10 * per_token),
            ws_request_s=max(0.0, ws_base - per_item - 10 * per_token),
            timer_overrun_s=_timer_overrun(),
        )

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


def _per_unit(work: Callable[[], object], units: int, repeat: int = 3) -> float:
    """The median of ``repeat`` timings, per unit (garbage collection included: it is real cost)."""
    work()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / units


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
            return _per_unit(lambda: conn.response.create(**body), 1, repeat=7)
    import httpx

    client = _sdk("http://127.0.0.1:9/v1", httpx.MockTransport(_empty_stream))
    try:
        return _per_unit(lambda: client.responses.create(stream=True, **body).close(), 1, repeat=7)
    finally:
        client.close()


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


@dataclass
class TurnCost:
    """One turn's predicted seconds: every stage the design's plan runs, and the client."""

    stages: dict[Stage, float] = field(default_factory=dict)
    tokens: dict[Stage, int] = field(default_factory=dict)  # the work of the size-dependent stages
    build: float = 0.0  # the client building the request
    tools: float = 0.0  # the client running tools
    first_token: float = 0.0  # the part of decode before the first token: in TTFT

    @property
    def api(self) -> dict[Stage, float]:
        return {s: v for s, v in self.stages.items() if bucket_of(s) == "api"}

    @property
    def inference(self) -> dict[Stage, float]:
        return {s: v for s, v in self.stages.items() if bucket_of(s) == "inference"}

    @property
    def client(self) -> float:
        return self.build + self.tools

    @property
    def total(self) -> float:
        return sum(self.stages.values()) + self.client

    @property
    def ttft(self) -> float:
        """Send to first delta: building the request, every stage before decode, the first token."""
        before = sum(v for s, v in self.stages.items() if s not in AFTER_FIRST_TOKEN)
        return self.build + before + self.first_token


# Stages whose time is CPU work alone, or (decode) paced to deadlines: no sleep wakes late in them.
NO_SLEEP = (Stage.VALIDATION, Stage.HYDRATION, Stage.RENDER, Stage.RETAIN, Stage.STORAGE, Stage.DECODE)

# Stages that run after the first token has left (decode itself counts only its first token).
AFTER_FIRST_TOKEN = (Stage.DECODE, Stage.OUTPUT_SAFETY, Stage.RETAIN, Stage.STORAGE, Stage.BILLING)


class Prediction(Sequence[TurnCost]):
    """The predicted turns of one rollout under one design (a sequence of ``TurnCost``).

    >>> from labkit import lab
    >>> p = lab.predict("naive", profile_name="local", scenario_name="synthetic:turns=2", cpu=CpuCosts())
    >>> len(p), sorted(p.frame()["bucket"].unique())
    (2, ['api', 'client', 'inference'])
    """

    def __init__(self, design: str, turns: Sequence[TurnCost]) -> None:
        self.design = design
        self.turns = tuple(turns)

    @overload
    def __getitem__(self, index: int) -> TurnCost: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TurnCost]: ...
    def __getitem__(self, index: int | slice) -> TurnCost | Sequence[TurnCost]:
        return self.turns[index]

    def __len__(self) -> int:
        return len(self.turns)

    @property
    def end_to_end(self) -> float:
        return end_to_end(self.turns)

    @property
    def mean_ttft(self) -> float:
        return mean_ttft(self.turns)

    def frame(self) -> pd.DataFrame:
        """One row per turn and stage (the client as ``build`` and ``tool``): ``design, turn, stage,
        bucket, seconds, tokens``, the same stage names and buckets as a measured rollout's frame."""
        import pandas as pd

        rows = []
        for t, cost in enumerate(self.turns):
            steps = [*cost.stages.items(), (ClientStep.BUILD, cost.build), (ClientStep.TOOL, cost.tools)]
            for stage, seconds in steps:
                rows.append(
                    {
                        "design": self.design,
                        "turn": t,
                        "stage": str(stage),
                        "bucket": bucket_of(stage),
                        "seconds": seconds,
                        "tokens": cost.tokens.get(stage, 0),
                    }
                )
        return pd.DataFrame(rows)


def predict(
    design: str | Design,
    profile: Profile,
    shape: Shape,
    *,
    decode_tps: float,
    prefill_tps: float,
    cpu: CpuCosts | None = None,
    fresh_connection: bool = False,
    store: bool = False,
    reconnects: Collection[int] = (),
) -> Prediction:
    """Per-turn costs of a rollout under a design: each stage its plan runs, priced.

    The plan (``Design.plan``) says which stages run on a turn and over what;
    this function only says what that costs. ``fresh_connection``: the HTTP
    client opens a new connection per request; ``store``: requests are stored.

    ``reconnects``: the turns (0-based, after the first) on which a WebSocket-mode
    client finds its connection gone, so the connection cache is missed. It opens a
    new socket (handshakes, upgrade, auth) and, its responses unstored, sends the
    whole history again: that turn is processed as the sprint's HTTP path would
    process it (validation and classifiers over everything; the render cache and
    model-config cache, where the design has them). Other designs ignore it; so does
    the appended prototype, whose paused response would not survive the reconnect.
    """
    d = compose(design) if isinstance(design, str) else design
    reconnecting = d.transport == "websocket" and not d.appended
    plan, cpu, net = d.plan, cpu or CpuCosts(), profile.network
    ms = 1e-3
    history = history_items = 0  # tokens and items before this turn's new ones
    unsettled = 0  # output markup not yet rendered into the buffer
    all_output = sum(t.output_tokens for t in shape.turns)
    turns = []
    for t, turn in enumerate(shape.turns):
        first, last = t == 0, t == len(shape.turns) - 1
        missed = reconnecting and not first and t in reconnects  # a new socket, the whole history
        over = Over.HISTORY if missed else None  # a new socket has seen nothing of the history
        sent = _over(plan[Stage.VALIDATION], turn.new_tokens, history, over)
        sent_items = _over(plan[Stage.VALIDATION], turn.new_items, history_items, over)
        scanned = _over(plan[Stage.INPUT_SAFETY], turn.new_tokens, history, over)
        rendered = turn.new_tokens + unsettled
        if first or plan[Stage.RENDER].over is not Over.NEW or (missed and not d.render_cache):
            rendered = shape.system_tokens + turn.new_tokens + history
        # The prefix cache holds everything up to the last full block before the new input,
        # so on average half a block more than the new input is prefilled.
        block = profile.engine.block_size
        uncached = shape.system_tokens + turn.new_tokens if first else turn.new_tokens + block / 2
        output = all_output if plan[Stage.OUTPUT_SAFETY].runs is Runs.LAST_TURN else turn.output_tokens

        cost = TurnCost(build=_build_seconds(d, cpu, sent_items, sent))
        # A reconnect runs the stages of a connection's first turn (connect, upgrade, auth).
        for stage in plan.stages_on(0 if missed else t, last, store=store):
            step = plan[stage]
            seconds = 0.0
            match stage:
                case Stage.CONNECT:
                    opened = first or not step.saved_by or fresh_connection
                    seconds = net.handshake_s() if opened else 0.0
                case Stage.UPGRADE:
                    seconds = net.rtt_ms * ms
                case Stage.UPLINK | Stage.DOWNLINK:
                    seconds = net.one_way_s()
                case Stage.AUTH:
                    seconds = profile.auth.hop_ms * ms
                case Stage.VALIDATION:
                    seconds = cpu.fixed_s_per_turn  # parsing, event framing and bookkeeping, both ends
                case Stage.INPUT_SAFETY:
                    seconds = profile.safety.cost_s(scanned, fast=d.fast_classifiers)
                    seconds += scanned * cpu.scan_s_per_token
                    cost.tokens[stage] = scanned
                case Stage.RENDER:
                    seconds = rendered * cpu.tokenize_s_per_token
                    cost.tokens[stage] = rendered
                case Stage.ROUTING:
                    # a hop on first use; after that, what the plan's mechanism saves is free
                    # (after a reconnect, only the model-config cache can save it)
                    hop = first or not step.saved_by or (missed and not d.model_config_cache)
                    seconds = profile.routing.model_config_hop_ms * ms if hop else 0.0
                case Stage.INTERMEDIARY:
                    seconds = profile.intermediary.hop_ms * ms
                case Stage.PREFILL:
                    seconds = uncached / prefill_tps
                    cost.tokens[stage] = round(uncached)
                case Stage.DECODE:
                    seconds = turn.output_tokens / decode_tps
                    cost.first_token = 1 / decode_tps
                    cost.tokens[stage] = turn.output_tokens
                case Stage.OUTPUT_SAFETY:
                    seconds = profile.safety.cost_s(output, fast=d.fast_classifiers)
                    cost.tokens[stage] = output
                case Stage.BILLING:
                    seconds = 0.0 if step.overlapped else profile.billing.hop_ms * ms
            if seconds > 0 and stage not in NO_SLEEP:  # a modeled delay is an asyncio sleep
                seconds += cpu.timer_overrun_s
            cost.stages[stage] = seconds
        cost.tools = turn.tool_s
        turns.append(cost)
        # The output's markup joins the rendered buffer at retain; where retain waits for the
        # end (an appended rollout), the next segment's render adds it.
        retained = plan[Stage.RETAIN].runs_on(t, last)
        unsettled = 0 if retained else turn.output_block_tokens - turn.output_tokens
        history += turn.new_tokens + turn.output_block_tokens
        history_items += turn.new_items + turn.output_items
    return Prediction(d.name, turns)


def _build_seconds(d: Design, cpu: CpuCosts, items: int, tokens: int) -> float:
    """The client building a turn's request: the official SDK over HTTP or WebSocket mode; the
    appended prototype's raw JSON frames cost next to nothing."""
    if d.appended:
        return 0.0
    fixed = cpu.ws_request_s if d.transport == "websocket" else cpu.http_request_s
    return fixed + items * cpu.client_s_per_sent_item + tokens * cpu.client_s_per_sent_token


def _over(step: Step, new: int, history: int, over: Over | None = None) -> int:
    """How much a stage works over: only the new input, or the history too (``over``: instead
    of the plan's)."""
    return new if (over or step.over) is Over.NEW else new + history


def end_to_end(costs: Iterable[TurnCost]) -> float:
    """The rollout's end to end: every turn, tools included (the last turn runs none).

    >>> end_to_end([TurnCost(stages={Stage.DECODE: 0.5}, tools=0.25)])
    0.75
    """
    return sum(c.total for c in costs)


def mean_ttft(costs: Iterable[TurnCost]) -> float:
    costs = list(costs)
    return sum(c.ttft for c in costs) / len(costs)
