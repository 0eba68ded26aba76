"""Each checked claim of the notebooks, beside its model counterpart: one function per claim, named
after it, that does the notebook's own computation (``lab.summary``, ``lab.saving``, ``lab.growth``
...) on the cost model's predicted rollouts of the same designs, scenario, profile and speeds, and
gives the claim's ``Margin``. ``COUNTERPARTS`` lists them notebook by notebook, with the way to read
a run's margin from the sentence it printed; ``claim_margins.py`` prices them all and reports.

    from claim_vocabulary import Machine
    sprint_cuts_ttft(Machine(CpuCosts.measure(), 3.0)).text()     # e.g. '+35.3 ms (+14 SE)'
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

import pandas as pd
from claim_vocabulary import (
    BURST,
    CLASSIC,
    PCT,
    SPARK,
    Counterpart,
    Machine,
    Margin,
    N,
    errors_of,
    nothing,
    of_saving,
    reader,
    sure,
    sure_share,
    value_of,
    verdict_only,
)

from labkit import lab
from labkit.analysis import whatif
from labkit.analysis.fit import read_inputs
from labkit.analysis.fit.check import MODEL_POINTS, placed
from labkit.analysis.fit.inputs import Figure
from labkit.analysis.fit.laptop import crossover, with_cpu
from labkit.analysis.fit.outcomes import FITTED_NAME, Basis, model_outcomes
from labkit.analysis.growth import Growth
from labkit.analysis.paired import SURE, Saving
from labkit.client import steering

# ---------------------------------------------------------------- 01 the naive stateless loop


def api_share_jumps(m: Machine) -> Margin:
    slow = lab.summary(m.frame("naive", model=CLASSIC))["api_share"]
    fast = lab.summary(m.frame("naive", model=SPARK))["api_share"]
    return share_jump(slow, fast)


def share_jump(slow: float, fast: float) -> Margin:
    return Margin(fast / slow - 1.5, "x", f"{slow:.0%} at 65 tokens/s, {fast:.0%} at 1,000 (x1.5 needed)")


def api_seconds_stay(m: Machine) -> Margin:
    api = {model: lab.turn_table(m.frame("naive", model=model))["api"].sum() for model in (CLASSIC, SPARK)}
    return seconds_within_a_quarter(api[CLASSIC], api[SPARK])


def seconds_within_a_quarter(at_65: float, at_1000: float) -> Margin:
    return Margin(
        0.25 - abs(at_1000 / at_65 - 1), "points", f"{at_65:.1f} s at 65 tokens/s, {at_1000:.1f} s at 1,000"
    )


def history_stages_grow(m: Machine) -> Margin:
    both = [m.frame("naive", model=CLASSIC), m.frame("naive", model=SPARK)]
    return growing(lab.growth(both, stages=lab.HISTORY_STAGES))


def api_time_grows(m: Machine) -> Margin:
    return growing(lab.growth([m.frame("naive", model=CLASSIC), m.frame("naive", model=SPARK)]))


def growing(g: Growth) -> Margin:
    return slope_margin(g.per_1k_ms, g.noise_ms)


def slope_margin(per_1k: float, noise: float) -> Margin:
    """A slope named only beyond three standard errors (``lab.growth``), like a saving."""
    return replace(sure(per_1k, noise, f"{per_1k:.1f} ± {noise:.1f} ms per 1k tokens"), unit="ms/1k")


def share_rises_at_4000(m: Machine) -> Margin:
    fast = lab.summary(m.frame("naive", model=SPARK))["api_share"]
    burst = lab.summary(m.frame("naive", model=BURST))["api_share"]
    return Margin(burst - fast, "points", f"{fast:.0%} at 1,000 tokens/s, {burst:.0%} at 4,000")


# ---------------------------------------------------------------- 02 single-request optimizations

STEPS = (
    "naive",
    "naive+render_cache+model_config_cache",
    "naive+render_cache+model_config_cache+no_intermediary",
    "naive+render_cache+model_config_cache+no_intermediary+fast_classifiers",
)
STAGE_OF_STEP = ("routing", "intermediary", "input_safety")  # the stage each step after naive changes


def sprint_cuts_ttft(m: Machine) -> Margin:
    cut = lab.saving(m.frame(STEPS[0]), m.frame(STEPS[-1]))
    return of_saving(cut, f"{cut.ms:.0f} ± {cut.noise_ms:.0f} ms a turn, {cut.share:.0%} of naive's")


def each_step_cuts_its_stage(m: Machine) -> Margin:
    pairs = [
        (lab.stage_ms(m.frame(before), [stage]).median(), lab.stage_ms(m.frame(after), [stage]).median())
        for before, after, stage in zip(STEPS[:-1], STEPS[1:], STAGE_OF_STEP, strict=True)
    ]
    return stages_cut(dict(zip(STAGE_OF_STEP, pairs, strict=True)))


def stages_cut(before_after: dict[str, tuple[float, float]]) -> Margin:
    shown = "; ".join(f"{stage} {b:.0f} -> {a:.0f} ms" for stage, (b, a) in before_after.items())
    return Margin(min(b - a - 3 for b, a in before_after.values()), "ms", shown)


# ---------------------------------------------------------------- 03 the persistent socket

SHORT_03 = "synthetic:turns=6,output_tokens=20,tool_tokens=500,instruction_tokens=2000"
WRITING_03 = "synthetic:turns=8,output_tokens=400,tool_tokens=200,instruction_tokens=4000"


def classifier_reads(m: Machine) -> Margin:
    scanned = {
        d: lab.stage_work(m.frame(d), ["input_safety"])["input_safety"] for d in ("naive", "websocket")
    }
    return reads_do_not_build_up(
        lab.trend(scanned["naive"]), scanned["naive"].iloc[-1], scanned["websocket"].max()
    )


def reads_do_not_build_up(http_shape: str, http_last: float, socket_max: float) -> Margin:
    value = http_last / 3 - socket_max if http_shape == "grows" else -1.0
    return Margin(
        value,
        "tokens",
        f"last turn {http_last:,.0f} over HTTP ({http_shape}), at most {socket_max:,.0f} on the socket",
    )


def socket_saves_against_both(m: Machine) -> Margin:
    f = m.frames(["naive", "sprint", "websocket"])
    vs_naive = lab.saving(f["naive"], f["websocket"], column="wall")
    vs_sprint = lab.saving(f["sprint"], f["websocket"], column="wall")
    return both_sure(vs_naive.share, vs_naive.noise_share, vs_sprint.share, vs_sprint.noise_share)


def both_sure(naive: float, naive_noise: float, sprint: float, sprint_noise: float) -> Margin:
    shown = (
        f"{naive:.0%} ± {naive_noise:.0%} against naive, {sprint:.0%} ± {sprint_noise:.0%} against the sprint"
    )
    return min(sure_share(naive, naive_noise, shown), sure_share(sprint, sprint_noise, shown), key=value_of)


def saves_more_against_naive(m: Machine) -> Margin:
    alone = lab.saving(m.frame("naive"), m.frame("sprint"), column="wall")
    return of_saving(alone, f"the sprint alone: {alone.ms:.0f} ± {alone.noise_ms:.0f} ms a turn")


def share_smaller_at_65(m: Machine) -> Margin:
    shares = [
        lab.compare(m.frames(["naive", "websocket"], scenario=SHORT_03, model=model)).loc[
            "websocket", "saved vs naive"
        ]
        for model in (CLASSIC, SPARK)
    ]
    return much_smaller(*shares)


def much_smaller(at_65: float, at_1000: float) -> Margin:
    return Margin(
        at_1000 / 2 - at_65,
        "points",
        f"{at_65:.0%} at 65 tokens/s, {at_1000:.0%} at 1,000 (half: {at_1000 / 2:.0%})",
    )


def seconds_same_order(m: Machine) -> Margin:
    seconds = []
    for model in (CLASSIC, SPARK):
        f = m.frames(["naive", "websocket"], scenario=SHORT_03, model=model)
        seconds.append(lab.end_to_end(f["naive"]) - lab.end_to_end(f["websocket"]))
    return within_two(*seconds)


def within_two(at_65: float, at_1000: float) -> Margin:
    ratio = at_65 / at_1000
    return Margin(
        min(ratio - 0.5, 2 - ratio),
        "x",
        f"{at_65:.2f} s at 65 tokens/s, {at_1000:.2f} s at 1,000 (x{ratio:.2f})",
    )


def same_ms_larger_share_at_4000(m: Machine) -> Margin:
    by_speed = {}
    for model in (SPARK, BURST):
        f = m.frames(["naive", "websocket"], scenario=WRITING_03, model=model)
        by_speed[model] = lab.saving(f["naive"], f["websocket"], column="wall")
    return same_ms_larger_share(by_speed[BURST], by_speed[SPARK])


def same_ms_larger_share(larger: Saving, other: Saving) -> Margin:
    """Two parts: the same milliseconds within a factor of two, and a larger share for ``larger``,
    beyond three times the two shares' combined noise. The weaker part, in standard errors."""
    noise = math.hypot(larger.noise_share, other.noise_share)
    share = share_gap(other.share, larger.share, noise)
    return min(about_the_same(larger.ms, larger.noise_ms, other.ms, other.noise_ms), share, key=errors_of)


def about_the_same(a: float, a_noise: float, b: float, b_noise: float) -> Margin:
    """Two savings within a factor of two of each other: the smaller doubled, less the larger (ms)."""
    (big, big_noise), (small, small_noise) = sorted(((a, a_noise), (b, b_noise)), reverse=True)
    spread = math.hypot(2 * small_noise, big_noise)
    value = 2 * small - big
    shown = f"{a:.0f} ± {a_noise:.0f} and {b:.0f} ± {b_noise:.0f} ms a turn"
    return Margin(value, "ms", shown, value / spread if spread > 0 else math.inf)


def share_gap(first: float, second: float, noise: float | None, also: str = "") -> Margin:
    """The second share over the first, beyond three times their combined noise (when known)."""
    shown = f"{first:.0%} then {second:.0%}" + (f"; {also}" if also else "")
    if noise is None:
        return Margin(second - first, "points", shown)
    return sure_share(second - first, noise, shown + f" (± {noise:.0%})")


# ---------------------------------------------------------------- 04 the appended prototype

SHORT_04 = "synthetic:turns=20,output_tokens=10,tool_tokens=50,instruction_tokens=4000"
LONG_04 = "synthetic:turns=20,output_tokens=200,tool_tokens=50,instruction_tokens=4000"
ONCE = ("hydration", "routing", "output_safety", "retain", "billing")
WIRES = ("websocket", "appended", "appended+prototype_wire")


def prototype_ahead(m: Machine) -> Margin:
    lead = lab.saving(m.frame("websocket"), m.frame("appended"), column="wall")
    return of_saving(
        lead, f"{lead.ms:.0f} ± {lead.noise_ms:.0f} ms a turn, {lead.shown()} of websocket's turn"
    )


def once_per_rollout(m: Machine) -> Margin:
    counts = {d: _stage_counts(m.frame(d)) for d in ("websocket", "appended")}
    turns = m.frame("appended")["turn"].nunique()
    holds = all(counts["appended"].get(s) == 1 for s in ONCE) and all(
        counts["websocket"].get(s) == turns for s in ONCE
    )
    shown = ", ".join(f"{s} {counts['appended'].get(s, 0)}" for s in ONCE) + f" (websocket: {turns} each)"
    return Margin(None if holds else -1.0, "", shown)


def shipped_keeps_most(m: Machine) -> Margin:
    f = m.frames(["naive", "websocket", "appended"])
    shipped = lab.saving(f["naive"], f["websocket"], column="wall")
    prototype = lab.saving(f["naive"], f["appended"], column="wall")
    return kept_over_half(shipped.ms / prototype.ms)


def kept_over_half(kept: float, also: str = "") -> Margin:
    return Margin(kept - 0.5, "points", f"it keeps {kept:.0%}" + (f" ({also})" if also else ""))


def fixed_lead_larger_on_short_turns(m: Machine) -> Margin:
    leads = {}
    for name, scenario in (("short", SHORT_04), ("long", LONG_04)):
        f = m.frames(["websocket", "appended"], scenario=scenario)
        leads[name] = lab.saving(f["websocket"], f["appended"], column="wall")
    return same_ms_larger_share(leads["short"], leads["long"])


# ---------------------------------------------------------------- 10 the SDK's inject beta


def beta_keeps_a_lead(m: Machine) -> Margin:
    return prototype_ahead(m)  # the same designs and task: the notebook runs them again, over the beta


def wires_run_the_same_stages(m: Machine) -> Margin:
    counts = [_stage_counts(m.frame(d)) for d in WIRES[1:]]
    return Margin(
        None if counts[0] == counts[1] else -1.0, "", f"{sum(counts[0].values())} spans on each wire"
    )


def inject_keeps_most(m: Machine) -> Margin:
    f = m.frames(WIRES)
    leads = [lab.saving(f["websocket"], f[d], column="wall") for d in WIRES[1:]]
    return kept_over_half(leads[0].ms / leads[1].ms, f"{leads[0].ms:.0f} of {leads[1].ms:.0f} ms a turn")


def _stage_counts(frame: pd.DataFrame) -> dict[str, int]:
    """How often each API stage ran: a predicted frame holds the stages the design's plan runs."""
    spans = frame[(frame["source"] == "server") & (frame["bucket"] == "api")]
    return spans["stage"].value_counts().to_dict()


# ---------------------------------------------------------------- 05 the what-if lab

MEASURED_05 = replace(
    whatif.PRESETS["fast coding model (1,000 tokens/s)"], turns=8
)  # 05 measures the lab on 8 turns


def sprint_and_socket_save_measured(m: Machine) -> Margin:
    f = _lab_frames(m, ("naive", "sprint", "websocket"))
    sprint = lab.saving(f["naive"], f["sprint"], column="wall")
    socket = lab.saving(f["sprint"], f["websocket"], column="wall")
    shown = (
        f"the sprint's steps {sprint.ms:.0f} ± {sprint.noise_ms:.0f} ms, "
        f"the socket's {socket.ms:.0f} ± {socket.noise_ms:.0f} ms a turn"
    )
    return min(of_saving(sprint, shown), of_saving(socket, shown), key=value_of)


def model_orders_designs(m: Machine) -> Margin:
    table = whatif.predict(replace(MEASURED_05, cpu_factor=m.factor), m.here).set_index("design")["e2e_s"]
    order = whatif.Ordering.of(table, table)
    gaps = {(a, b): 1 - table[a] / table[b] for a, b in order.clear}
    (a, b), gap = min(gaps.items(), key=lambda kv: kv[1])
    close = ", ".join(f"{x} and {y} {1 - table[x] / table[y]:.0%}" for x, y in order.close) or "none"
    shown = f"closest pair judged: {a} {gap:.0%} below {b}; not judged: {close}"
    return Margin(gap, "points", shown)


def model_fast_for_naive(m: Machine) -> Margin:
    """What a run of naive spends beyond the model on the lab's measured point: the fit file's
    ``[unmodeled]`` turn of naive, CPU work measured on the fit file's machine, moved to this
    machine by the two machines' CPU costs per 1k tokens, times the factor."""
    naive = lab.end_to_end(_lab_frames(m, ("naive",))["naive"])
    fit = read_inputs()
    to_here = m.here.per_1k_ms / fit.cpu.per_1k_ms
    extra = fit.unmodeled["naive"].turn_s * to_here * m.factor * MEASURED_05.turns
    error = naive / (naive + extra) - 1
    return Margin(-error, "points", f"naive {error:+.0%} (the model {naive:.2f} s, a run {extra:.2f} s more)")


def _lab_frames(m: Machine, designs: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The lab's measured point as the model prices it (``whatif.predicted_rollouts``), 8 turns."""
    return whatif.predicted_rollouts(replace(MEASURED_05, cpu_factor=m.factor), m.here, designs)


# ---------------------------------------------------------------- 06 real clients


def socket_saves_short_rollout(m: Machine) -> Margin:
    f = m.frames(["sprint", "websocket"], scenario="synthetic:turns=8,tool_tokens=500")
    s = lab.saving(f["sprint"], f["websocket"], column="wall")
    return sure_share(s.share, s.noise_share, f"{s.shown()} of the sprint's average turn")


# ---------------------------------------------------------------- 08 reading published numbers

SOCKET_08 = "saved:websocket/sprint"  # the integrators' comparison, under labkit's reading

def lands_where_the_model_predicts(m: Machine) -> Margin:
    """08 prices the laptop's machine from the same run it checks (its CPU costs; on
    production-like, its tools' time and its work beyond the model), so on the model a run lands on
    its prediction at any CPU, with no noise: the margin is the model's own allowance. ``shown``
    says where the prediction moves with the CPU, beside what the fit expects on its machine."""
    predicted, on_fit_machine = _laptop_outcomes(m), _laptop_outcomes(None)
    margin = within_leeway({key: (0.0, 0.0) for key in predicted})
    shown = ", ".join(f"{k} {v:.1%} (its machine {on_fit_machine[k]:.1%})" for k, v in predicted.items())
    return replace(margin, shown=shown)


def within_leeway(off: dict[str, tuple[float, float]]) -> Margin:
    """Each outcome's measured less predicted and the noise of it (shares): how far the farthest
    lies inside its leeway (``Landing.leeway``: the model's allowance and three standard errors)."""
    room = {key: MODEL_POINTS + SURE * noise - abs(gap) for key, (gap, noise) in off.items()}
    shown = ", ".join(f"{k} {gap * 100:+.1f} ± {noise * 100:.1f} points" for k, (gap, noise) in off.items())
    return Margin(min(room.values()), "points", shown)


def same_side_as_predicted(m: Machine) -> Margin:
    """On the model the measured saving is the predicted one: the claim is decided as long as the
    prediction lies beyond the allowance of every integrator's figure (nearer, one run cannot tell)."""
    predicted = _laptop_outcomes(m)[SOCKET_08]
    figures = _integrators()
    room = min(abs(predicted - f.value) for f in figures) - MODEL_POINTS
    laptop = with_cpu(read_inputs(), m.cpu)
    reached = crossover(laptop, lab.profile(FITTED_NAME), SOCKET_08, [figures[0].value])[0]
    lowest = f"{figures[0].who}'s {figures[0].value:.0%}"
    where = f"reached at x{reached:.1f} its CPU time" if reached else "not reached within x100"
    shown = f"{predicted:.1%} predicted, {placed(predicted, figures)}; {lowest} {where}"
    return Margin(room, "points", shown)


def sides(measured: float, predicted: float, leeway: float) -> Margin:
    """A run's sentence: for each integrator's figure, how far the measurement lies on the
    prediction's side of it (below zero: the other side), or, where the prediction is within the
    leeway of it, how far inside (one run cannot tell)."""
    each = [
        abs(predicted - f.value) - leeway
        if abs(predicted - f.value) <= leeway
        else (measured - f.value) * (1 if predicted > f.value else -1)
        for f in _integrators()
    ]
    shown = f"{measured:.0%} measured, {predicted:.0%} predicted, leeway {leeway:.0%}"
    return Margin(min(each), "points", shown)


def _integrators() -> list[Figure]:
    return sorted((f for f in read_inputs().figures if not f.fitted), key=lambda f: f.value)


@functools.cache
def _laptop_outcomes(m: Machine | None) -> dict[str, float]:
    """The fitted profile's outcomes as the model prices them on the laptop (``with_cpu``: its CPU
    costs, the fit file's tools and work beyond the model scaled to it); None: on the fit's machine."""
    inputs = read_inputs()
    laptop = inputs if m is None else with_cpu(inputs, m.cpu)
    return model_outcomes(laptop, Basis.of(laptop), lab.profile(FITTED_NAME))


# ---------------------------------------------------------------- 09 steering a running answer


def steer_first(tps: int) -> Callable[[Machine], Margin]:
    """The notebook's check at one speed, on the cost model (which has no steering: each way is
    priced as the stages it runs, see ``correction_ms``)."""

    def at_speed(m: Machine) -> Margin:
        return answered_first(**correction_ms(m, tps))

    at_speed.__name__ = f"steer_first_at_{tps}"
    return at_speed


def answered_first(steer: float, resend: float, wait: float) -> Margin:
    return Margin(
        min(resend, wait) - steer,
        "ms",
        f"steer {steer:,.0f} ms, resend {resend:,.0f} ms, wait {wait:,.0f} ms",
    )


ANSWER_TOKENS = {65: 150, 1000: 400}  # as the notebook asks
AFTER_TOKENS = 30
SESSION = 4000  # steering.measure's instructions, tokens
SENTENCE_TOKENS = 22  # the passage's sentences are about this long: a steer waits half of one, on average


def correction_ms(m: Machine, tps: int) -> dict[str, float]:
    """From the correction to its answer's first token, each way, priced by the cost model:
    ``steer`` half a sentence more of the old answer, then a follow-up on the socket from the
    connection cache; ``wait`` the rest of the old answer and its closing stages, then the same
    follow-up; ``resend`` a new stateless request (the sprint's HTTP) over the whole conversation,
    prefilled afresh, on the open connection. The notebook's clients build no request (raw frames)."""
    model = steering.MODELS[tps]
    answer = ANSWER_TOKENS[tps]
    chain = f"synthetic:turns=2,output_tokens={answer},tool_tokens=15,instruction_tokens={SESSION}"
    socket = m.frame("websocket", scenario=chain, model=model)
    old, follow_up = (socket[socket["turn"] == t] for t in (0, 1))
    reply = _ttft(follow_up)
    closing = _after_decode(old)
    conversation = SESSION + AFTER_TOKENS + 30  # instructions, question, the part read, correction
    whole = f"synthetic:turns=1,output_tokens={answer},tool_tokens=0,instruction_tokens={conversation}"
    resent = m.frame("sprint", scenario=whole, model=model)
    connect = resent.loc[resent["stage"] == "connect", "duration"].sum()
    return {
        "steer": (SENTENCE_TOKENS / 2 / tps + closing + reply) * 1000,
        "resend": (_ttft(resent) - connect) * 1000,
        "wait": ((answer - AFTER_TOKENS) / tps + closing + reply) * 1000,
    }


def _ttft(turn: pd.DataFrame) -> float:
    """A turn's time to first token, less the client building its request."""
    instants = turn.set_index("stage")["start"]
    build = turn.loc[turn["stage"] == "build", "duration"].sum()
    return float(instants["first_delta"] - instants["send"] - build)


def _after_decode(turn: pd.DataFrame) -> float:
    """The stages after decoding ends, before the terminal event (the old answer's close)."""
    server = turn[turn["source"] == "server"]
    decode_end = server.loc[server["stage"] == "decode", ["start", "duration"]].sum(axis=1).max()
    return float(server.loc[server["start"] >= decode_end, "duration"].sum())


COUNTERPARTS: tuple[Counterpart, ...] = (
    Counterpart(
        "01",
        "the API's share jumps at 1,000 tokens/s",
        api_share_jumps,
        reader(rf"{N}% of end to end at 65 tokens/s, {N}% at 1,000", share_jump, PCT, PCT),
    ),
    Counterpart(
        "01",
        r"the API's seconds stay about the same \(within a quarter\)",
        api_seconds_stay,
        reader(rf"{N} s at 65 tokens/s, {N} s at 1,000", seconds_within_a_quarter),
    ),
    Counterpart(
        "01",
        "the stages that read the history take longer as it grows",
        history_stages_grow,
        reader(rf"{N} ± {N} ms per 1k", slope_margin),
    ),
    Counterpart(
        "01",
        "each turn's API time grows with the history",
        api_time_grows,
        reader(rf"{N} ± {N} ms per 1k", slope_margin),
    ),
    Counterpart(
        "01",
        "the API's share rises again at 4,000 tokens/s",
        share_rises_at_4000,
        reader(
            rf"{N}% of end to end at 1,000 tokens/s, {N}% at 4,000",
            lambda a, b: share_gap(a, b, None),
            PCT,
            PCT,
        ),
    ),
    Counterpart(
        "02",
        "the sprint cuts TTFT against naive",
        sprint_cuts_ttft,
        reader(
            rf"{N} ± {N} ms a turn", lambda ms, noise: sure(ms, noise, f"{ms:.0f} ± {noise:.0f} ms a turn")
        ),
    ),
    Counterpart(
        "02",
        "each step takes time off the stage it changes",
        each_step_cuts_its_stage,
        lambda e: (
            stages_cut({s: (float(b), float(a)) for s, b, a in re.findall(rf"(\w+) {N} -> {N} ms", e)})
            if re.search(r"-> ", e)
            else None
        ),
    ),
    Counterpart(
        "03",
        "over HTTP the classifier reads more every turn; on the socket it does not build up",
        classifier_reads,
        reader(
            rf"last turn {N} tokens over HTTP, {N} on the socket; at most {N}",
            lambda last, _socket_last, most: reads_do_not_build_up("grows", last, most),
        ),
        why="tokens, not time: what the classifier reads is the design's plan over the task's items",
    ),
    Counterpart(
        "03",
        "the socket saves end to end against naive and against the sprint",
        socket_saves_against_both,
        reader(rf"{N}% ± {N}% against naive, {N}% ± {N}% against the sprint", both_sure, PCT, PCT, PCT, PCT),
    ),
    Counterpart(
        "03",
        r"it saves more against naive than against the sprint \(the sprint saved too\)",
        saves_more_against_naive,
        reader(
            rf"sprint alone: {N} ± {N} ms",
            lambda ms, noise: sure(ms, noise, f"{ms:.0f} ± {noise:.0f} ms a turn"),
        ),
    ),
    Counterpart(
        "03",
        "the socket's share is much smaller at 65 tokens/s than at 1,000",
        share_smaller_at_65,
        reader(rf"{N}% at 65 tokens/s, {N}% at 1,000", much_smaller, PCT, PCT),
    ),
    Counterpart(
        "03",
        r"the seconds it saves are of the same order at both speeds \(within a factor of two\)",
        seconds_same_order,
        reader(rf"{N} s at 65 tokens/s, {N} s at 1,000", within_two),
    ),
    Counterpart(
        "03",
        r"the socket saves about the same milliseconds a turn at both speeds \(within a factor of two\), "
        r"so a larger share at 4,000 tokens/s",
        same_ms_larger_share_at_4000,
        reader(
            rf"{N} ± {N} ms and {N} ± {N} ms a turn; {N}% ± {N}% of a turn at 1,000, {N}% ± {N}% at 4,000",
            lambda a, an, b, bn, s1, n1, s4, n4: _measured_pair(b, bn, s4, n4, a, an, s1, n1),
        ),
    ),
    Counterpart(
        "04",
        "the prototype is ahead of the shipped design on a typical turn",
        prototype_ahead,
        reader(
            rf"{N} ± {N} ms a turn", lambda ms, noise: sure(ms, noise, f"{ms:.0f} ± {noise:.0f} ms a turn")
        ),
    ),
    Counterpart(
        "04",
        "the prototype runs hydration, routing, output safety, retain and billing once per rollout",
        once_per_rollout,
        verdict_only,
        why="which stages run is the design's plan: each runs or does not, whatever the CPU",
    ),
    Counterpart(
        "04",
        "the shipped design keeps most of the prototype's saving",
        shipped_keeps_most,
        reader(rf"it keeps {N}%", kept_over_half, PCT),
    ),
    Counterpart(
        "04",
        r"the prototype's lead is fixed work a turn: about the same milliseconds on short turns and on "
        r"long answers \(within a factor of two\), so a larger share of the short turns",
        fixed_lead_larger_on_short_turns,
        reader(
            rf"{N} ± {N} ms a turn on short turns, {N} ± {N} ms on long answers; {N}% ± {N}% of a short "
            rf"turn, {N}% ± {N}% of a long one",
            lambda a, an, b, bn, s1, n1, s2, n2: _measured_pair(a, an, s1, n1, b, bn, s2, n2),
        ),
    ),
    Counterpart(
        "05",
        "measured turn by turn, the sprint's steps and the socket's each save time on this laptop",
        sprint_and_socket_save_measured,
        reader(
            rf"the sprint's steps {N} ± {N} ms, the socket's {N} ± {N} ms a turn",
            lambda a, an, b, bn: min(
                sure(a, an, f"{a:.0f} ± {an:.0f}"), sure(b, bn, f"{b:.0f} ± {bn:.0f}"), key=value_of
            ),
        ),
    ),
    Counterpart(
        "05",
        "the measurement orders every two designs the model puts 10% apart as the model does",
        model_orders_designs,
        reader(
            rf"{N} of {N} pairs",
            lambda agreed, clear: Margin(
                None if agreed == clear else agreed - clear, "", f"{agreed:.0f} of {clear:.0f} pairs"
            ),
        ),
        why="the model against a run: the model's side is how far apart it puts the closest pair it judges",
    ),
    Counterpart(
        "05",
        "the model is fast for naive: a real run pays work the model leaves out",
        model_fast_for_naive,
        reader(rf"naive {N}%", lambda error: Margin(-error, "points", f"naive {error:+.0%}"), PCT),
        why=(
            "the model against a run, a bound at any CPU: every CPU cost it prices is the fastest of several "
            "timings, a modelled delay never wakes early, and it leaves out work a run pays (the fit file's "
            "[unmodeled], scaled here)"
        ),
    ),
    Counterpart(
        "06",
        "a follow-up's classifier reads more over HTTP than on the socket",
        None,
        nothing,
        why="tokens, not time: over HTTP the classifier reads the stored history, on the socket new items",
    ),
    Counterpart(
        "06",
        "a learner's key sees only its own responses",
        None,
        nothing,
        why="access, not time: the traces stream filters by key",
    ),
    Counterpart(
        "06",
        "WebSocket mode saves against the sprint on a typical turn of this short rollout",
        socket_saves_short_rollout,
        reader(rf"{N}% ± {N}% of the sprint", lambda s, n: sure_share(s, n, f"{s:.0%} ± {n:.0%}"), PCT, PCT),
    ),
    Counterpart(
        "08",
        "each measured outcome lands within 2 points and three standard errors of what the model predicts "
        "for this laptop",
        lands_where_the_model_predicts,
        lambda e: (
            within_leeway(
                {
                    key: (float(gap) / 100, float(noise) / 100)
                    for key, gap, noise in re.findall(rf"([\w:/]+) [^;]*?predicted \({N} ± <?{N} points\)", e)
                }
            )
            if "predicted" in e
            else None
        ),
        why=(
            "the model against a run on the same laptop: the notebook prices the laptop's machine from the "
            "run it checks, so at any CPU the model's side lands on its prediction and leaves the 2-point "
            "allowance; a run's noise and the model's own error use it"
        ),
    ),
    Counterpart(
        "08",
        "the socket's saving over the sprint, measured, sits on the same side of each integrator's figure as "
        "the model's prediction for this laptop",
        same_side_as_predicted,
        reader(rf"{N}% measured, {N}% predicted \([^)]*\), leeway {N} points?", sides, PCT, PCT, PCT),
        why=(
            "the prediction moves with the CPU (on a slower laptop the socket saves more over the sprint); "
            "the margin is how far it stays from the nearest integrator's figure beyond the 2-point allowance"
        ),
    ),
    *(
        Counterpart(
            "09",
            rf"at {tps:,} tokens/s a steered correction is answered sooner than a resent or awaited one",
            steer_first(tps),
            reader(rf"steer {N} ms, resend {N} ms, wait {N} ms", answered_first),
        )
        for tps in (65, 1000)
    ),
    Counterpart(
        "10",
        "over the SDK's beta, the appended design keeps a lead over the shipped design on a typical turn",
        beta_keeps_a_lead,
        reader(
            rf"{N} ± {N} ms a turn", lambda ms, noise: sure(ms, noise, f"{ms:.0f} ± {noise:.0f} ms a turn")
        ),
    ),
    Counterpart(
        "10",
        "both wires run the same API stages, as often",
        wires_run_the_same_stages,
        verdict_only,
        why="which stages run is the design's plan, the same on both wires whatever the CPU",
    ),
    Counterpart(
        "10",
        "the inject wire keeps most of the prototype wire's lead over the shipped design",
        inject_keeps_most,
        reader(rf"it keeps {N}%", kept_over_half, PCT),
    ),
)


def _measured_pair(
    ms: float,
    ms_noise: float,
    share: float,
    share_noise: float,
    other_ms: float,
    other_noise: float,
    other_share: float,
    other_share_noise: float,
) -> Margin:
    """``same_ms_larger_share`` from a sentence's numbers (shares in percent)."""
    larger = Saving(ms, ms_noise, ms / (share / 100) if share else 1.0, 0)
    other = Saving(other_ms, other_noise, other_ms / (other_share / 100) if other_share else 1.0, 0)
    noise = math.hypot(share_noise, other_share_noise) / 100
    gap = share_gap(other_share / 100, share / 100, noise)
    return min(about_the_same(larger.ms, larger.noise_ms, other.ms, other.noise_ms), gap, key=errors_of)
