"""The outcomes a fit compares with the figures, priced by the cost model for a set of delays.

A setting of the unknowns becomes a profile (``with_values``); the cost model prices each
design on the fit's rollout (``Basis``), what a real run spends beyond the model is added
(``[unmodeled]``), and each outcome is a saving as a share of the baseline's time.

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> inputs = read_inputs()
    >>> basis = Basis.of(inputs)
    >>> got = model_outcomes(inputs, basis, basis.base)
    >>> sorted(got) == sorted(inputs.keys), all(0 < v < 1 for v in got.values())
    (True, True)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from labkit.analysis.cost_model import Prediction, Shape, predict
from labkit.analysis.fit.inputs import FitInputError, FitInputs, Parameter
from labkit.analysis.saving import share_saved
from labkit.engine.catalogue import UnknownModel, load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import Profile, load_profile
from labkit.scenarios import ScenarioNotFound, load_scenario

FITTED_NAME = "article-fit"


def with_values(base: Profile, parameters: Sequence[Parameter], values: Sequence[float]) -> Profile:
    """``base`` with each parameter's field set (a share multiplies the field it is a share of).

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> base = load_profile("production-like", default_data_dir())
    >>> p = with_values(base, read_inputs().parameters, [5, 6, 8, 12, 20, 1.0, 0.5, 0.3, 10])
    >>> p.network.rtt_ms, p.safety.fast_hop_ms
    (5, 10.0)
    """
    settled = {p.field: v for p, v in zip(parameters, values, strict=True)}
    for p in parameters:
        if p.share_of:
            of = settled.get(p.share_of, field_value(base, p.share_of))
            settled[p.field] = settled[p.field] * of
    profile = base
    for name, value in settled.items():
        section, key = name.split(".")
        profile = replace(profile, **{section: replace(getattr(profile, section), **{key: value})})
    return replace(profile, name=FITTED_NAME)


def field_value(profile: Profile, name: str) -> float:
    """A profile's field by its ``section.name``: ``field_value(p, "auth.hop_ms") -> 6``."""
    section, key = name.split(".")
    return getattr(getattr(profile, section), key)


@dataclass(frozen=True)
class Basis:
    """What the outcomes are priced on: the scenario's shape (its tools' time set to the stated
    total), the model's speeds, the base profile."""

    shape: Shape
    decode_tps: float
    prefill_tps: float
    base: Profile

    @classmethod
    def of(cls, inputs: FitInputs) -> Basis:
        """Raises ``FitInputError`` for a scenario, model or base profile that does not exist."""
        try:
            measured = _shape(inputs.scenario)
            spec = load_catalogue().resolve(inputs.model)
            base = load_profile(inputs.base_profile, default_data_dir())
        except (ScenarioNotFound, UnknownModel, ValueError) as e:
            raise FitInputError(f"{inputs.source.name} [setting]: {e}") from None
        total = sum(t.tool_s for t in measured.turns)
        turns = tuple(
            replace(t, tool_s=inputs.tool_s * (t.tool_s / total if total else 1 / len(measured.turns)))
            for t in measured.turns
        )
        return cls(Shape(measured.system_tokens, turns), spec.decode_tps, spec.prefill_tps, base)


@functools.cache
def _shape(scenario: str) -> Shape:
    return Shape.of(load_scenario(scenario, default_data_dir()))


def predictions(inputs: FitInputs, basis: Basis, profile: Profile) -> dict[str, Prediction]:
    """The cost model's prediction for each design the figures name (nothing unmodeled added)."""
    return {
        design: predict(
            design,
            profile,
            basis.shape,
            decode_tps=basis.decode_tps,
            prefill_tps=basis.prefill_tps,
            cpu=inputs.cpu,
        )
        for design in inputs.designs
    }


@dataclass(frozen=True)
class Timing:
    """A design's mean TTFT and end to end (seconds): the numbers an outcome compares."""

    mean_ttft: float
    end_to_end: float


def timings(inputs: FitInputs, basis: Basis, profile: Profile) -> dict[str, Timing]:
    """Each design's timing as a real run is expected to measure it: the cost model's, plus
    what the fit file states a run spends beyond it per turn (``[unmodeled]``)."""
    out = {}
    for design, priced in predictions(inputs, basis, profile).items():
        extra = inputs.unmodeled.get(design)
        out[design] = Timing(
            priced.mean_ttft + (extra.ttft_s if extra else 0.0),
            priced.end_to_end + (extra.turn_s * len(priced) if extra else 0.0),
        )
    return out


def outcome(kind: str, design: Timing | Prediction, baseline: Timing | Prediction) -> float:
    """A saving as a share: of the baseline's mean TTFT (``ttft_cut``) or end to end (``saved``).

    >>> design, baseline = Timing(mean_ttft=0.06, end_to_end=2.0), Timing(mean_ttft=0.1, end_to_end=4.0)
    >>> outcome("ttft_cut", design, baseline), outcome("saved", design, baseline)
    (0.4, 0.5)
    """
    if kind == "ttft_cut":
        return share_saved(design.mean_ttft, baseline.mean_ttft)
    return share_saved(design.end_to_end, baseline.end_to_end)


def model_outcomes(inputs: FitInputs, basis: Basis, profile: Profile) -> dict[str, float]:
    """Each outcome the figures are set against, for ``profile``: what a real run is expected
    to measure (``timings``)."""
    by_design = timings(inputs, basis, profile)
    out = {}
    for key in inputs.keys:
        kind, _, pair = key.partition(":")
        design, _, baseline = pair.partition("/")
        out[key] = outcome(kind, by_design[design], by_design[baseline])
    return out
