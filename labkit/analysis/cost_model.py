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
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labkit.api.ids import new_id
from labkit.engine.policies import Call, Say, ScriptedPolicy, text_of_tokens
from labkit.engine.render import encode_block, item_block, system_block
from labkit.engine.tokenizer import encode_text
from labkit.scenarios import Scenario
from labkit.server.designs import DESIGNS, Design
from labkit.server.profiles import Profile


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
    """A rollout's sizes: the system block, then each turn's new input and output."""

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
                calls = [a for a in actions if isinstance(a, Call)]
                outputs = [_output_item(a) for a in actions]
                out_tokens = sum(len(encode_text(item_block(i)[1])) for i in outputs)
                start = time.perf_counter()
                results = [tools.run(c.name, c.arguments) for c in calls]
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
                new_items = [{"type": "function_call_output", "call_id": "c", "output": r} for r in results]
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


@dataclass(frozen=True)
class CpuCosts:
    """Real CPU work per unit, as measured on this machine (seconds)."""

    tokenize_s_per_token: float = 0.25e-6  # tiktoken on code and prose
    scan_s_per_token: float = 0.4e-6  # a classifier scan: tokenize plus pattern matching
    client_s_per_sent_item: float = 0.25e-3  # the SDK preparing a request, per input item
    client_s_per_sent_token: float = 0.05e-6  # ... and per token of input
    fixed_s_per_turn: float = 0.002  # request parsing, event framing and bookkeeping, both ends

    @classmethod
    def measure(cls) -> CpuCosts:
        """Time the real work on this machine (about 0.2 s): tokenizing and scanning source
        code, and the official SDK preparing requests of many small or few large items."""
        from labkit.server import pipeline
        from labkit.server.safety import scan

        text = Path(pipeline.__file__).read_text()
        tokens = len(encode_text(text))
        tokenize = _per_unit(lambda: encode_text(text), tokens)
        scanning = _per_unit(lambda: scan([text]), tokens)
        many = _request_seconds(items=200, tokens_each=100)
        few = _request_seconds(items=20, tokens_each=1000)
        # many = 200 a + 20k b, few = 20 a + 20k b  =>  a = (many - few) / 180
        per_item = max(0.0, (many - few) / 180)
        per_token = max(0.0, (few - 20 * per_item) / 20_000)
        return cls(tokenize, scanning, per_item, per_token, cls.fixed_s_per_turn)


def _per_unit(work: Callable[[], object], units: int, repeat: int = 3) -> float:
    work()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best / units


def _request_seconds(items: int, tokens_each: int) -> float:
    """What the official SDK spends turning an input list into a request body."""
    from openai._utils._transform import maybe_transform
    from openai.types.responses import response_create_params

    history = [
        {"type": "function_call_output", "call_id": f"call_{i}", "output": text_of_tokens(tokens_each)}
        for i in range(items)
    ]
    body = {"model": "m", "input": history, "stream": True}
    params = response_create_params.ResponseCreateParamsStreaming
    return _per_unit(lambda: json.dumps(maybe_transform(body, params)), 1)


@dataclass
class TurnCost:
    """One turn's seconds, by where they go."""

    api: dict[str, float] = field(default_factory=dict)
    inference: dict[str, float] = field(default_factory=dict)
    build: float = 0.0  # the client building the request
    tools: float = 0.0  # the client running tools

    @property
    def client(self) -> float:
        return self.build + self.tools

    @property
    def total(self) -> float:
        return sum(self.api.values()) + sum(self.inference.values()) + self.client

    @property
    def ttft(self) -> float:
        """Send to first delta: building the request, everything before decode, the first token."""
        before = sum(v for k, v in self.api.items() if k not in AFTER_FIRST_TOKEN)
        return (
            self.build + before + self.inference.get("prefill", 0.0) + self.inference.get("first_token", 0.0)
        )


AFTER_FIRST_TOKEN = ("output_safety", "billing")


def predict(
    design: str | Design,
    profile: Profile,
    shape: Shape,
    *,
    decode_tps: float,
    prefill_tps: float,
    cpu: CpuCosts | None = None,
    fresh_connection: bool = False,
) -> list[TurnCost]:
    """Per-turn costs of a rollout under a design."""
    d = DESIGNS[design] if isinstance(design, str) else design
    cpu = cpu or CpuCosts()
    net = profile.network
    ms = 1e-3
    history = history_items = 0  # tokens and items before this turn's new ones
    costs = []
    for t, turn in enumerate(shape.turns):
        c = TurnCost()
        first = t == 0
        stateful = d.connection_cache and not first
        appended_segment = d.appended and not first
        # -- network and the door
        if d.connection_cache:  # one socket: handshakes and the upgrade once
            c.api["connect"] = net.handshake_s() + net.rtt_ms * ms if first else 0.0
            c.api["auth"] = profile.auth.hop_ms * ms if first else 0.0
        else:
            c.api["connect"] = net.handshake_s() if (first or fresh_connection) else 0.0
            c.api["auth"] = profile.auth.hop_ms * ms
        c.api["network"] = net.rtt_ms * ms
        # -- before inference
        sent = turn.new_tokens if stateful else history + turn.new_tokens
        sent_items = turn.new_items if stateful else history_items + turn.new_items
        scanned = 0 if appended_segment else sent
        if not appended_segment:
            c.api["input_safety"] = profile.safety.cost_s(scanned, fast=d.fast_classifiers)
        c.api["scan_cpu"] = scanned * cpu.scan_s_per_token
        rendered = turn.new_tokens if (d.render_cache and not first) else shape.system_tokens + sent
        c.api["render"] = rendered * cpu.tokenize_s_per_token
        if not (d.model_config_cache and not first) and not stateful:
            c.api["routing"] = profile.routing.model_config_hop_ms * ms
        if d.intermediary_hop:
            c.api["intermediary"] = profile.intermediary.hop_ms * ms
        c.build = sent_items * cpu.client_s_per_sent_item + sent * cpu.client_s_per_sent_token
        c.api["cpu_fixed"] = cpu.fixed_s_per_turn
        # -- inference: the prefix cache holds everything up to the last full block before the
        # new input, so on average half a block more than the new input is prefilled.
        block = profile.engine.block_size
        uncached = shape.system_tokens + turn.new_tokens if first else turn.new_tokens + block / 2
        c.inference["prefill"] = uncached / prefill_tps
        c.inference["first_token"] = 1 / decode_tps
        c.inference["decode"] = (turn.output_tokens - 1) / decode_tps
        # -- after inference
        last = t == len(shape.turns) - 1
        if not d.appended or last:
            out = turn.output_tokens if not d.appended else sum(x.output_tokens for x in shape.turns)
            c.api["output_safety"] = profile.safety.cost_s(out, fast=d.fast_classifiers)
        if not d.async_billing:
            c.api["billing"] = profile.billing.hop_ms * ms
        c.tools = turn.tool_s
        costs.append(c)
        history += turn.new_tokens + turn.output_block_tokens
        history_items += turn.new_items + turn.output_items
    return costs


def end_to_end(costs: Sequence[TurnCost]) -> float:
    """The rollout's end to end: every turn, tools included (the last turn runs none)."""
    return sum(c.total for c in costs)


def mean_ttft(costs: Sequence[TurnCost]) -> float:
    return sum(c.ttft for c in costs) / len(costs)
