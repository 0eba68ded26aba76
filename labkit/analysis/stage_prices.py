"""What each stage of one turn works over, and what that costs: the cost model's price list.

``Work.of`` reads a design's plan for one turn (over the new items or the whole history, the
render cache's reuse, the prefix cache's half block); each stage has one pricing function in
``PRICES``, from the profile's modeled delays, the CPU's costs and the model's speeds:

>>> from labkit.analysis.cpu_costs import CpuCosts
>>> from labkit.designs import compose
>>> from labkit.paths import default_data_dir
>>> from labkit.profiles import load_profile
>>> local = load_profile("local", default_data_dir())
>>> rates = Rates(compose("naive"), local, CpuCosts(), 1000, prefill_tps=20000, fresh_connection=False)
>>> work = Work(False, False, sent=0, sent_items=0, scanned=0, rendered=0, uncached=0, decoded=250, checked=0)
>>> PRICES[Stage.DECODE](rates, rates.design.plan[Stage.DECODE], work)
(0.25, 250)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.shape import Shape, TurnShape
from labkit.api.stages import Stage
from labkit.designs import Design, Over, Runs, Step
from labkit.profiles import Profile


@dataclass(frozen=True)
class Progress:
    """What came before a turn: the history's tokens and items, and output markup not yet rendered."""

    tokens: int = 0
    items: int = 0
    unsettled: int = 0

    def after(self, turn: TurnShape, *, retained: bool) -> Progress:
        """Progress once ``turn`` is done.

        The output's markup joins the rendered buffer at retain; where retain waits for the
        end (an appended rollout), the next segment's render adds it.
        """
        return Progress(
            tokens=self.tokens + turn.new_tokens + turn.output_block_tokens,
            items=self.items + turn.new_items + turn.output_items,
            unsettled=0 if retained else turn.output_block_tokens - turn.output_tokens,
        )


@dataclass(frozen=True)
class Work:
    """What one turn's stages work over, by the design's plan (tokens, unless it says items)."""

    first: bool  # the rollout's first turn
    missed: bool  # a WebSocket reconnect: a new socket, the whole history sent again
    sent: int  # the request's input, as validated
    sent_items: int
    scanned: int  # by the input classifier
    rendered: int
    uncached: float  # prefilled: not in the prefix cache
    decoded: int
    checked: int  # by the output classifier

    @classmethod
    def of(cls, d: Design, profile: Profile, shape: Shape, t: int, missed: bool, so_far: Progress) -> Work:
        turn, first, plan = shape.turns[t], t == 0, d.plan
        over = Over.HISTORY if missed else None  # a new socket has seen nothing of the history
        rendered = turn.new_tokens + so_far.unsettled
        if first or plan[Stage.RENDER].over is not Over.NEW or (missed and not d.render_cache):
            rendered = shape.system_tokens + turn.new_tokens + so_far.tokens
        # The prefix cache holds everything up to the last full block before the new input,
        # so on average half a block more than the new input is prefilled.
        block = profile.engine.block_size
        all_output = plan[Stage.OUTPUT_SAFETY].runs is Runs.LAST_TURN
        return cls(
            first=first,
            missed=missed,
            sent=_over(plan[Stage.VALIDATION], turn.new_tokens, so_far.tokens, over),
            sent_items=_over(plan[Stage.VALIDATION], turn.new_items, so_far.items, over),
            scanned=_over(plan[Stage.INPUT_SAFETY], turn.new_tokens, so_far.tokens, over),
            rendered=rendered,
            uncached=shape.system_tokens + turn.new_tokens if first else turn.new_tokens + block / 2,
            decoded=turn.output_tokens,
            checked=sum(t.output_tokens for t in shape.turns) if all_output else turn.output_tokens,
        )


# ---------------------------------------------------------------- each stage, priced

MS = 1e-3  # seconds in a millisecond (profiles give hops in ms)


@dataclass(frozen=True)
class Rates:
    """What prices a stage: the design, the profile's delays, the CPU's costs, the model's speeds."""

    design: Design
    profile: Profile
    cpu: CpuCosts
    decode_tps: float
    prefill_tps: float
    fresh_connection: bool


# A stage's seconds, and the tokens it worked over (None for a stage whose cost has no size).
Price = tuple[float, int | None]


def free(rates: Rates, step: Step, work: Work) -> Price:
    return 0.0, None


def _connect(rates: Rates, step: Step, work: Work) -> Price:
    opened = work.first or not step.saved_by or rates.fresh_connection
    return (rates.profile.network.handshake_s() if opened else 0.0), None


def _round_trip(rates: Rates, step: Step, work: Work) -> Price:
    return rates.profile.network.rtt_ms * MS, None


def _one_way(rates: Rates, step: Step, work: Work) -> Price:
    return rates.profile.network.one_way_s(), None


def _auth(rates: Rates, step: Step, work: Work) -> Price:
    return rates.profile.auth.hop_ms * MS, None


def _validation(rates: Rates, step: Step, work: Work) -> Price:
    return rates.cpu.fixed_s_per_turn, None  # parsing, event framing and bookkeeping, both ends


def _input_safety(rates: Rates, step: Step, work: Work) -> Price:
    hop = rates.profile.safety.cost_s(work.scanned, fast=rates.design.fast_classifiers)
    return hop + work.scanned * rates.cpu.scan_s_per_token, work.scanned


def _render(rates: Rates, step: Step, work: Work) -> Price:
    return work.rendered * rates.cpu.tokenize_s_per_token, work.rendered


def _routing(rates: Rates, step: Step, work: Work) -> Price:
    # a hop on first use; after that, what the plan's mechanism saves is free
    # (after a reconnect, only the model-config cache can save it)
    hop = work.first or not step.saved_by or (work.missed and not rates.design.model_config_cache)
    return (rates.profile.routing.model_config_hop_ms * MS if hop else 0.0), None


def _intermediary(rates: Rates, step: Step, work: Work) -> Price:
    return rates.profile.intermediary.hop_ms * MS, None


def _prefill(rates: Rates, step: Step, work: Work) -> Price:
    return work.uncached / rates.prefill_tps, round(work.uncached)


def _decode(rates: Rates, step: Step, work: Work) -> Price:
    return work.decoded / rates.decode_tps, work.decoded


def _output_safety(rates: Rates, step: Step, work: Work) -> Price:
    return rates.profile.safety.cost_s(work.checked, fast=rates.design.fast_classifiers), work.checked


def _billing(rates: Rates, step: Step, work: Work) -> Price:
    return (0.0 if step.overlapped else rates.profile.billing.hop_ms * MS), None


# The stages the model prices; the others (hydration, queue, retain, storage) cost nothing here.
PRICES: dict[Stage, Callable[[Rates, Step, Work], Price]] = {
    Stage.CONNECT: _connect,
    Stage.UPGRADE: _round_trip,
    Stage.UPLINK: _one_way,
    Stage.DOWNLINK: _one_way,
    Stage.AUTH: _auth,
    Stage.VALIDATION: _validation,
    Stage.INPUT_SAFETY: _input_safety,
    Stage.RENDER: _render,
    Stage.ROUTING: _routing,
    Stage.INTERMEDIARY: _intermediary,
    Stage.PREFILL: _prefill,
    Stage.DECODE: _decode,
    Stage.OUTPUT_SAFETY: _output_safety,
    Stage.BILLING: _billing,
}


def build_seconds(d: Design, cpu: CpuCosts, items: int, tokens: int, *, first: bool = True) -> float:
    """The client building a turn's request: the official SDK over HTTP or WebSocket mode (the
    appended design's first turn too, on the SDK's beta connection), then for the appended
    design's later turns the SDK's inject of the tool outputs; over the prototype's wire, raw
    JSON frames that cost next to nothing. ``first``: the rollout's first turn."""
    if d.prototype_wire:
        return 0.0
    sent = tokens * cpu.client_s_per_sent_token
    if d.appended and not first:
        return cpu.inject_s + items * cpu.inject_s_per_item + sent
    fixed = cpu.ws_request_s if d.transport == "websocket" else cpu.http_request_s
    return fixed + items * cpu.client_s_per_sent_item + sent


def _over(step: Step, new: int, history: int, over: Over | None = None) -> int:
    """How much a stage works over: only the new input, or the history too (``over``: instead
    of the plan's)."""
    return new if (over or step.over) is Over.NEW else new + history
