"""The fit on another machine: the same fitted delays, priced with a laptop's machine in place of
the one the fit file describes.

The fit file's ``[machine]`` (the CPU costs and the tools' time) and ``[unmodeled]`` (what a run
of each design spends beyond the cost model) were measured on one machine. On another, the same
fitted profile gives other outcomes: CPU work is a larger or a smaller part of every turn, and
naive has the most of it. A laptop's machine comes two ways:

- ``with_cpu``: from its CPU costs alone (``CpuCosts.measure``), the file's tools and unmodeled
  work scaled by the same factor: what the cost model can say before anything runs;
- ``measured_machine``: its CPU costs, and the tools' time and unmodeled work that one run on
  the fit's base profile measured there, as the fit file's own were measured: a busy laptop's
  included (other programs stretch every CPU-bound step, which the CPU costs, the fastest of
  several timings, do not show).

``crossover`` finds how many times slower (or faster) a machine's CPU work would have to be for
an outcome to reach a figure.

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> inputs = read_inputs()
    >>> slower = scaled(inputs, 2)
    >>> naive, slow_naive = inputs.unmodeled["naive"], slower.unmodeled["naive"]
    >>> round(slower.tool_s / inputs.tool_s, 9), round(slow_naive.turn_s / naive.turn_s, 9)
    (2.0, 2.0)
    >>> same = with_cpu(inputs, inputs.cpu)
    >>> same.unmodeled == inputs.unmodeled and same.tool_s == inputs.tool_s
    True
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

import pandas as pd

from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.fit.inputs import FitInputs, Unmodeled
from labkit.analysis.fit.outcomes import Basis, Timing, model_outcomes, predictions
from labkit.analysis.metrics import summary
from labkit.api.stages import ClientStep
from labkit.profiles import Profile


def scaled(inputs: FitInputs, factor: float) -> FitInputs:
    """``inputs`` on a machine whose CPU work takes ``factor`` times as long: its CPU costs
    (``CpuCosts.scaled``), its tools (test runs: CPU work too) and the work a run spends beyond
    the model (parsing, validating, framing), each times ``factor``."""
    extra = {d: Unmodeled(u.ttft_s * factor, u.turn_s * factor) for d, u in inputs.unmodeled.items()}
    return replace(inputs, cpu=inputs.cpu.scaled(factor), tool_s=inputs.tool_s * factor, unmodeled=extra)


def cpu_factor(reference: CpuCosts, cpu: CpuCosts) -> float:
    """How many times as long ``cpu``'s machine takes over the same CPU work as ``reference``'s,
    by the one number a CPU is known by in labkit (``CpuCosts.per_1k_ms``).

    >>> round(cpu_factor(CpuCosts(), CpuCosts().scaled(3)), 6)
    3.0
    """
    return cpu.per_1k_ms / reference.per_1k_ms


def with_cpu(inputs: FitInputs, cpu: CpuCosts) -> FitInputs:
    """``inputs`` on a laptop known by its CPU costs alone: those costs, and the file's tools and
    unmodeled work scaled by ``cpu_factor`` (they were measured on the file's machine)."""
    return replace(scaled(inputs, cpu_factor(inputs.cpu, cpu)), cpu=cpu)


def timing_of(frame: pd.DataFrame) -> Timing:
    """A measured rollout's mean TTFT and end to end (seconds), as an outcome compares them."""
    measured = summary(frame)
    return Timing(measured["ttft_mean_s"], measured["e2e_s"])


def measured_machine(inputs: FitInputs, cpu: CpuCosts, base_run: Mapping[str, pd.DataFrame]) -> FitInputs:
    """``inputs`` with a laptop's machine as a run there measured it: ``cpu``, the tools' time (the
    median, over ``base_run``'s rollouts, of each one's tool runs) and, per design, what its
    rollout spent beyond the cost model priced with them (in mean TTFT, and per turn in end to
    end). ``base_run`` holds a rollout of each design the figures compare, on the fit's base
    profile (``inputs.base_profile``): a run of the fitted profile is what the result predicts,
    never what it is made from."""
    missing = sorted(set(inputs.designs) - set(base_run))
    if missing:
        raise ValueError(f"the base profile's run has no rollout of {', '.join(missing)}")
    tools = statistics.median(_tool_seconds(frame) for frame in base_run.values())
    here = replace(inputs, cpu=cpu, tool_s=tools, unmodeled={})
    basis = Basis.of(here)
    extra = {}
    for design, priced in predictions(here, basis, basis.base).items():
        run = timing_of(base_run[design])
        extra[design] = Unmodeled(
            ttft_s=run.mean_ttft - priced.mean_ttft, turn_s=(run.end_to_end - priced.end_to_end) / len(priced)
        )
    return replace(here, unmodeled=extra)


def _tool_seconds(frame: pd.DataFrame) -> float:
    return float(frame.loc[frame["stage"] == str(ClientStep.TOOL), "duration"].sum())


def crossover(
    inputs: FitInputs, profile: Profile, key: str, targets: Sequence[float], most: float = 100.0
) -> list[float | None]:
    """For each target share, the factor (between ``1 / most`` and ``most``) by which the CPU work
    of ``inputs``' machine (``scaled``) would have to take longer for outcome ``key`` to reach it;
    None where it does not within that range. The first crossing on a grid of factors, refined by
    halving (on a log scale).

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> inputs = read_inputs()
    >>> profile = Basis.of(inputs).base
    >>> slower = scaled(inputs, 2.0)
    >>> at = model_outcomes(slower, Basis.of(slower), profile)["saved:websocket/sprint"]
    >>> [round(k, 3) for k in crossover(inputs, profile, "saved:websocket/sprint", [at])]
    [2.0]
    """

    def at(log_k: float) -> float:
        slower = scaled(inputs, math.exp(log_k))
        return model_outcomes(slower, Basis.of(slower), profile)[key]  # the tools' time scaled too

    grid = [math.log(most) * i / 8 for i in range(-8, 9)]
    values = [at(x) for x in grid]
    found: list[float | None] = []
    for target in targets:
        steps = [
            (a, b)
            for a, b, va, vb in zip(grid, grid[1:], values, values[1:], strict=False)
            if (va - target) * (vb - target) <= 0
        ]
        if not steps:
            found.append(None)
            continue
        low, high = steps[0]
        rising = at(high) >= at(low)
        for _ in range(40):
            middle = (low + high) / 2
            if (at(middle) < target) == rising:
                low = middle
            else:
                high = middle
        found.append(math.exp((low + high) / 2))
    return found
