"""A run of the fitted profile set beside what the model predicts for the laptop it ran on.

One run, two servers on the laptop: the fit's base profile (``production-like``) and the fitted
one (``article-fit``), each playing the designs the figures compare, every rollout taking turns
with all the others (``side_by_side``). The base profile's rollouts measure the laptop's machine
(``laptop.measured_machine``); the model, priced with that machine and the fitted delays,
predicts each outcome of the fitted profile's rollouts; ``landings`` sets each measured outcome
beside its prediction, with the noise of the two runs.

The noise, turn by turn: what the fitted profile's rollout spent beyond the model, less what the
base profile's rollout of the same design spent beyond it on the same turn. The two ran the same
turns on the same laptop at nearly the same moments, so what is left is each turn's jitter (and
the model's error on that turn). Its standard deviation is one turn's noise (a turn that stalled
counts, as it counts in the total); a total of n turns carries √n of it, a mean 1/√n. An outcome
lands where the model predicts if it is within ``MODEL_POINTS`` and ``SURE`` standard errors of
it.

    >>> landing = Landing("saved:websocket/sprint", measured=0.118, predicted=0.121, noise=0.008)
    >>> landing.shown(), landing.within
    ('-0.3 ± 0.8 points', True)
    >>> Landing("ttft_cut:sprint/naive", measured=0.52, predicted=0.46, noise=0.005).within
    False
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from labkit.analysis.fit.inputs import Figure, FitInputs
from labkit.analysis.fit.laptop import timing_of
from labkit.analysis.fit.outcomes import Basis, model_outcomes, outcome, predictions
from labkit.analysis.metrics import turns
from labkit.analysis.paired import SURE
from labkit.analysis.precision import decimals, fixed, percent, with_noise
from labkit.client.agent import take_turns
from labkit.profiles import Profile

# What the model may miss by beyond a run's noise (a share: 2 points). It carries the work a run
# spends beyond it from the base profile to the fitted one as milliseconds per turn, which is close,
# not exact: in 14 runs of notebook 08 on a 2-core machine, quiet and with one core kept busy,
# WebSocket mode against naive landed below its prediction 13 times, by up to 3.4 points, where a
# quiet run's noise is a few tenths of a point.
MODEL_POINTS = 0.02


@dataclass(frozen=True)
class Landing:
    """One outcome of a run of the fitted profile beside the model's prediction for the laptop it
    ran on (shares of time saved), and the standard error of their difference (``noise``)."""

    key: str
    measured: float
    predicted: float
    noise: float

    @property
    def off(self) -> float:
        """Measured less predicted, a share (0.01 is a point)."""
        return self.measured - self.predicted

    @property
    def leeway(self) -> float:
        """How far the measurement may land from the prediction: the model's own ``MODEL_POINTS``
        and ``SURE`` standard errors of the two runs."""
        return MODEL_POINTS + SURE * self.noise

    @property
    def within(self) -> bool:
        return abs(self.off) <= self.leeway

    def shown(self) -> str:
        """Measured less predicted, in points, with its noise: ``'+0.5 ± 0.6 points'``."""
        return with_noise(self.off * 100, self.noise * 100, sign=True, unit=" points")

    def said(self) -> str:
        """Both shares and their difference, to the precision the noise allows.

        >>> Landing("ttft_cut:sprint/naive", measured=0.4644, predicted=0.4781, noise=0.004).said()
        '46.4% measured, 47.8% predicted (-1.4 ± 0.4 points)'
        """
        places = decimals(self.noise * 100)
        shares = (fixed(share * 100, places) for share in (self.measured, self.predicted))
        return "{}% measured, {}% predicted ({})".format(*shares, self.shown())

    def same_side(self, figure: float) -> bool | None:
        """Whether the measurement lies on the same side of ``figure`` as the prediction; None
        where the prediction lies within the leeway of it (one run cannot tell the side).

        >>> landing = Landing("saved:websocket/sprint", measured=0.12, predicted=0.13, noise=0.01)
        >>> landing.same_side(0.30), landing.same_side(0.05), landing.same_side(0.15)
        (True, True, None)
        """
        if abs(self.predicted - figure) <= self.leeway:
            return None
        return (self.measured < figure) == (self.predicted < figure)


def placed(share: float, figures: Sequence[Figure]) -> str:
    """Where a share lies among figures, in words (the figures from the lowest).

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> held_out = [f for f in read_inputs().figures if not f.fitted]
    >>> placed(0.12, held_out)
    "below Cursor's 30%, Cline's 39% and Vercel's 40%"
    >>> placed(0.35, held_out)
    "above Cursor's 30%; below Cline's 39% and Vercel's 40%"
    """
    ranked = sorted(figures, key=lambda f: f.value)
    above = [f"{f.who}'s {percent(f.value)}" for f in ranked if share >= f.value]
    below = [f"{f.who}'s {percent(f.value)}" for f in ranked if share < f.value]
    sides = (("above", above), ("below", below))
    return "; ".join(f"{side} {_listed(names)}" for side, names in sides if names)


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def side_by_side(
    base_urls: Mapping[str, str], designs: Sequence[str], scenario: str, **options: Any
) -> dict[str, dict[str, pd.DataFrame]]:
    """One rollout of each design on each server (named, by base URL), all of them taking turns
    (``take_turns`` on each server, a round on one, then a round on the next), so a laptop that
    gets busier meanwhile slows every rollout alike. The frames, by server name, then design.

        base = LabkitServer(args=["--profile", "production-like"])
        with base, LabkitServer(args=["--profile", "article-fit"]) as fitted:
            urls = {"production-like": base.base_url, "article-fit": fitted.base_url}
            runs = side_by_side(urls, ["naive", "sprint"], "fix-failing-test", model="labkit-spark")
    """
    playing = {name: take_turns(url, designs, scenario, **options) for name, url in base_urls.items()}
    played: dict[str, dict] = {}
    while playing:
        for name, rounds in list(playing.items()):
            after = next(rounds, None)
            if after is None:
                del playing[name]
            else:
                played[name] = after
    return {name: {d: r.frame() for d, r in rollouts.items()} for name, rollouts in played.items()}


def landings(
    here: FitInputs,
    profile: Profile,
    base_run: Mapping[str, pd.DataFrame],
    fitted_run: Mapping[str, pd.DataFrame],
) -> dict[str, Landing]:
    """Each outcome the figures are set against, measured on ``fitted_run`` (a rollout of each
    design on ``profile``) beside the model's prediction with ``here``'s machine (the laptop's,
    ``laptop.measured_machine`` from ``base_run``), with the noise of the two runs."""
    basis = Basis.of(here)
    models = {"base": predictions(here, basis, basis.base), "fitted": predictions(here, basis, profile)}
    runs = {"base": base_run, "fitted": fitted_run}
    spread = {d: _spread(d, runs, models) for d in here.designs}
    predicted = model_outcomes(here, basis, profile)
    measured = {d: timing_of(fitted_run[d]) for d in here.designs}
    out = {}
    for key in here.keys:
        kind, _, pair = key.partition(":")
        design, _, baseline = pair.partition("/")
        d, b = measured[design], measured[baseline]
        n = len(models["fitted"][design])
        if kind == "ttft_cut":
            got_d, got_b = d.mean_ttft, b.mean_ttft
            se_d, se_b = spread[design]["ttft"] / math.sqrt(n), spread[baseline]["ttft"] / math.sqrt(n)
        else:
            got_d, got_b = d.end_to_end, b.end_to_end
            se_d, se_b = spread[design]["wall"] * math.sqrt(n), spread[baseline]["wall"] * math.sqrt(n)
        noise = math.hypot(se_d / got_b, got_d * se_b / got_b**2)  # of 1 - got_d / got_b
        out[key] = Landing(key, outcome(kind, d, b), predicted[key], noise)
    return out


def _spread(design: str, runs: Mapping[str, Mapping[str, pd.DataFrame]], models: Mapping) -> dict[str, float]:
    """One turn's noise (seconds), in TTFT and in a whole turn: the spread of what the fitted run
    spent beyond the model less what the base run did, turn by turn."""
    beyond = {}
    for name in ("base", "fitted"):
        measured, priced = turns(runs[name][design]), models[name][design]
        if len(measured) != len(priced):
            raise ValueError(f"{design} played {len(measured)} turns on {name}, not {len(priced)}")
        beyond[name] = {
            "ttft": measured["ttft"].to_numpy() - [t.ttft for t in priced],
            "wall": measured["wall"].to_numpy() - [t.total for t in priced],
        }
    fitted, base = beyond["fitted"], beyond["base"]
    return {column: statistics.stdev(fitted[column] - base[column]) for column in base}
