"""The vocabulary of ``claim_margins.py``: a laptop the cost model prices (``Machine``), how far a
claim is from flipping (``Margin``), and a notebook's claim with its model counterpart and the way
to read a run's margin back from the sentence the run printed (``Counterpart``).

    m = Machine(CpuCosts.measure(), 0.3)          # a laptop whose CPU work takes 0.3 times as long
    frame = m.frame("naive", model="labkit-spark")  # a predicted rollout, as Rollout.frame() holds one
    lab.summary(frame)["api_share"]
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from labkit import lab
from labkit.analysis.cost_model import predict
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.paired import SURE, Saving
from labkit.analysis.shape import Shape
from labkit.analysis.whatif.as_run import run_frame
from labkit.engine.catalogue import load_catalogue
from labkit.profiles import DEFAULT_PROFILE

FACTORS = (0.3, 1.0, 3.0)
TASK = "fix-failing-test"
SPARK, CLASSIC, BURST = "labkit-spark", "labkit-classic", "labkit-burst"


class Machine:
    """The cost model on a laptop whose CPU work takes ``factor`` times this machine's: rollouts
    predicted as the notebooks run them, as frames the notebooks' metrics read.

        m = Machine(CpuCosts(), 3.0)
        lab.summary(m.frame("naive", model="labkit-classic"))["api_share"]
    """

    def __init__(self, cpu: CpuCosts, factor: float) -> None:
        self.here, self.factor, self.cpu = cpu, factor, cpu.scaled(factor)

    @functools.cache  # noqa: B019  (a Machine lives for one report)
    def frame(
        self, design: str, scenario: str = TASK, model: str = SPARK, profile: str = DEFAULT_PROFILE
    ) -> pd.DataFrame:
        shape = self.shape(scenario)
        spec = load_catalogue().resolve(model)
        priced = predict(
            design,
            lab.profile(profile),
            shape,
            decode_tps=spec.decode_tps,
            prefill_tps=spec.prefill_tps,
            cpu=self.cpu,
        )
        return run_frame(priced, shape)

    def frames(self, designs: Sequence[str], **where: str) -> dict[str, pd.DataFrame]:
        return {design: self.frame(design, **where) for design in designs}

    def shape(self, scenario: str) -> Shape:
        """The scenario's sizes, its tools' time (measured here, on a sandbox) times the factor."""
        measured = lab.shape(scenario)
        return Shape(
            measured.system_tokens, tuple(replace(t, tool_s=t.tool_s * self.factor) for t in measured.turns)
        )


@dataclass(frozen=True)
class Margin:
    """How far one claim is from flipping: ``value`` in ``unit`` (above zero it holds; None where a
    number says nothing more than the words), ``errors`` the same in standard errors where the
    notebook asks for three of them, ``shown`` the quantities it comes from."""

    value: float | None
    unit: str
    shown: str
    errors: float | None = None

    def text(self) -> str:
        """The margin in a few characters, e.g. ``+4.2 ms (5.1 SE)``."""
        if self.value is None:
            return "holds"
        if not self.unit:
            return "does not hold"
        number = UNITS[self.unit](self.value)
        if self.errors is not None:
            number += f" ({self.errors:+.0f} SE)" if abs(self.errors) < 100 else " (>99 SE)"
        return number


UNITS: dict[str, Callable[[float], str]] = {
    "points": lambda v: f"{v * 100:+.1f} pt",
    "ms": lambda v: f"{v:+.1f} ms",
    "x": lambda v: f"{v:+.2f}x",
    "tokens": lambda v: f"{v:+,.0f} tok",
    "ms/1k": lambda v: f"{v:+.2f} ms/1k",
    "s": lambda v: f"{v:+.3f} s",
}


def sure(ms: float, noise_ms: float, shown: str) -> Margin:
    """A saving the notebook names only beyond ``SURE`` standard errors: its margin over that line."""
    errors = ms / noise_ms - SURE if noise_ms > 0 else math.inf
    return Margin(ms - SURE * noise_ms, "ms", shown, errors)


def sure_share(share: float, noise: float, shown: str) -> Margin:
    """``sure`` for a saving shown as a share of a turn, ± its noise (also a share)."""
    errors = share / noise - SURE if noise > 0 else math.inf
    return Margin(share - SURE * noise, "points", shown, errors)


def of_saving(s: Saving, shown: str) -> Margin:
    return sure(s.ms, s.noise_ms, shown)


# ---------------------------------------------------------------- the claims, notebook by notebook


@dataclass(frozen=True)
class Counterpart:
    """One claim of a notebook: its name as ``lab.claim`` gives it (a regular expression where the
    notebook builds it), its model counterpart (None: it does not depend on timing, ``why``),
    and how to read a run's margin from the sentence it printed."""

    notebook: str
    claim: str
    model: Callable[[Machine], Margin] | None
    read: Callable[[str], Margin | None]
    why: str = ""

    def names(self, name: str) -> bool:
        return re.fullmatch(self.claim, name) is not None


NUMBER = r"([-+−]?[\d,]*\.?\d+)"
N = NUMBER  # in the counterparts' patterns
PCT = 0.01  # a percentage's scale


def numbers(evidence: str) -> list[float]:
    """The numbers of a claim's evidence, in order (``1,000`` is one number, ``−3`` negative).

    >>> numbers("45% ± 3% against naive, 1,000 tokens; −2 points")
    [45.0, 3.0, 1000.0, -2.0]
    """
    return [float(n.replace(",", "").replace("−", "-")) for n in re.findall(NUMBER, evidence)]


def reader(pattern: str, margin: Callable[..., Margin], *scales: float) -> Callable[[str], Margin | None]:
    """Read a sentence's evidence with ``pattern`` (its groups in ``margin``'s order, each times its
    scale: 0.01 for a percentage) and give ``margin`` of them; None where the sentence differs."""

    def read(evidence: str) -> Margin | None:
        found = re.search(pattern, evidence)
        if found is None:
            return None
        values = [float(g.replace(",", "").replace("−", "-")) for g in found.groups()]
        return margin(*(v * s for v, s in zip(values, scales or [1.0] * len(values), strict=True)))

    return read


def nothing(_evidence: str) -> Margin | None:
    return None


def verdict_only(evidence: str) -> Margin | None:
    return Margin(None, "", evidence)


def value_of(margin: Margin) -> float:
    return -math.inf if margin.value is None else margin.value


def errors_of(margin: Margin) -> float:
    """A margin's size in standard errors, for the weaker of a claim's parts (none: its value)."""
    if margin.errors is not None:
        return margin.errors
    return value_of(margin)
