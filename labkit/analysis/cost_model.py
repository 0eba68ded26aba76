"""The analytic cost model: per-turn and end-to-end time of each design, instantly, from inputs.

It adds up, turn by turn, what each stage of the pipeline costs under a
design: the profile's modeled delays (hops, round trips, classifier cost per
token), the model's prefill and decode time, the client's tools, and the
real CPU work, estimated from per-token costs measured on this machine
(``labkit.analysis.cpu_costs``). It runs nothing on a server, so a what-if slider can
call it hundreds of times a second; ``benchmarks/cost_model.py`` checks it
against measured rollouts.

The scenario enters as a ``Shape`` (``labkit.analysis.shape``): per turn, the
tokens of the new input items, of the output, and the seconds of client tools.
Each stage has one pricing function (``PRICES``); ``predict`` works out, turn by
turn, what the design's plan makes each stage work over (``Work``) and prices it.

Two inputs describe a machine or a network rather than a design:
``CpuCosts.scaled`` prices the CPU work on a slower (or faster) machine, and
``reconnects`` names the turns on which a WebSocket client found its
connection gone and opened a new one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.shape import Shape
from labkit.analysis.stage_prices import PRICES, Progress, Rates, Work, build_seconds, free
from labkit.api.stages import ClientStep, Stage, bucket_of
from labkit.designs import Design, compose
from labkit.profiles import Profile

if TYPE_CHECKING:
    import pandas as pd


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
    rates = Rates(d, profile, cpu or CpuCosts(), decode_tps, prefill_tps, fresh_connection)
    reconnecting = d.transport == "websocket" and not d.appended
    so_far = Progress()
    turns = []
    for t, turn in enumerate(shape.turns):
        last = t == len(shape.turns) - 1
        missed = reconnecting and t != 0 and t in reconnects  # a new socket, the whole history
        work = Work.of(d, profile, shape, t, missed, so_far)
        # A reconnect runs the stages of a connection's first turn (connect, upgrade, auth).
        stages = d.plan.stages_on(0 if missed else t, last, store=store)
        turns.append(_turn_cost(rates, work, stages, tool_s=turn.tool_s))
        so_far = so_far.after(turn, retained=d.plan[Stage.RETAIN].runs_on(t, last))
    return Prediction(d.name, turns)


def _turn_cost(rates: Rates, work: Work, stages: Iterable[Stage], *, tool_s: float) -> TurnCost:
    """One turn: the client building the request and running tools, and each stage, priced."""
    d, cpu = rates.design, rates.cpu
    cost = TurnCost(build=build_seconds(d, cpu, work.sent_items, work.sent, first=work.first), tools=tool_s)
    for stage in stages:
        seconds, tokens = PRICES.get(stage, free)(rates, d.plan[stage], work)
        if seconds > 0 and stage not in NO_SLEEP:  # a modeled delay is an asyncio sleep
            seconds += cpu.timer_overrun_s
        cost.stages[stage] = seconds
        if tokens is not None:
            cost.tokens[stage] = tokens
    if Stage.DECODE in cost.stages:
        cost.first_token = 1 / rates.decode_tps
    return cost


def end_to_end(costs: Iterable[TurnCost]) -> float:
    """The rollout's end to end: every turn, tools included (the last turn runs none).

    >>> end_to_end([TurnCost(stages={Stage.DECODE: 0.5}, tools=0.25)])
    0.75
    """
    return sum(c.total for c in costs)


def mean_ttft(costs: Iterable[TurnCost]) -> float:
    costs = list(costs)
    return sum(c.ttft for c in costs) / len(costs)
