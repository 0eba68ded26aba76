"""The inverse what-if: the service costs under which the articles' figures would hold.

The what-if lab goes from costs to outcomes. This goes back: given what the articles
report (the sprint's TTFT nearly 45% lower, agent loops 40% faster end to end, the
integrators' 30-40% for WebSocket mode over the HTTP API), which network round trip,
service hops, classifier costs and billing hop make labkit's cost model give those
outcomes on the default rollout at 1,000 tokens/s?

Three comparisons, nine unknowns: the figures cannot decide everything, so every
unknown has a prior (labkit's own guess, ``production-like``, spread over the design
notes' range) and bounds, and the fit is a penalised least squares: each figure's miss
in units of its tolerance, plus each parameter's distance from its prior in units of
its spread, minimised within the bounds. The fit reports each figure's residual, how
strongly each outcome responds to each parameter, and how much the figures narrowed
each prior: a parameter they barely narrow is one they cannot pin down. Everything it
uses, the figures included, is in ``data/fits/articles.toml``.

    >>> fit = fit_articles()
    >>> sorted(fit.outcomes) == sorted({f.key for f in fit.inputs.figures})
    True
"""

from __future__ import annotations

import functools
import textwrap
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from labkit.analysis.cost_model import CpuCosts, Prediction, Shape, predict
from labkit.engine.catalogue import UnknownModel, load_catalogue
from labkit.paths import builtin_data_dir, default_data_dir
from labkit.profiles import SECTIONS, Profile, load_profile
from labkit.scenarios import ScenarioNotFound, load_scenario

FIT_FILE = builtin_data_dir() / "fits" / "articles.toml"
OUTCOMES = ("ttft_cut", "saved")  # 1 - mean TTFT (or end to end) of the design / of the baseline
CPU_FIELDS = {  # the [machine] table's keys -> CpuCosts' fields and the unit each key is in (s)
    "tokenize_ms_per_1k": ("tokenize_s_per_token", 1e-6),
    "scan_ms_per_1k": ("scan_s_per_token", 1e-6),
    "client_ms_per_sent_item": ("client_s_per_sent_item", 1e-3),
    "client_ms_per_1k_sent_tokens": ("client_s_per_sent_token", 1e-6),
    "fixed_ms_per_turn": ("fixed_s_per_turn", 1e-3),
    "http_request_ms": ("http_request_s", 1e-3),
    "ws_request_ms": ("ws_request_s", 1e-3),
    "timer_overrun_ms": ("timer_overrun_s", 1e-3),
}


class FitInputError(ValueError):
    """A fit file that cannot be used: one line saying what is wrong."""


@dataclass(frozen=True)
class Figure:
    """One published number, and the comparison it was measured on."""

    name: str
    who: str
    quote: str
    outcome: str  # one of OUTCOMES
    design: str
    baseline: str
    value: float
    tolerance: float

    @property
    def compared(self) -> str:
        """What was compared, in words: ``websocket vs sprint, end to end``."""
        return f"{self.design} vs {self.baseline}, {'TTFT' if self.outcome == 'ttft_cut' else 'end to end'}"

    @property
    def key(self) -> str:
        """The outcome it is set against, e.g. ``saved:websocket/sprint``."""
        return f"{self.outcome}:{self.design}/{self.baseline}"


@dataclass(frozen=True)
class Parameter:
    """One unknown delay: the profile field it sets, its prior, spread and bounds."""

    field: str  # "section.name" in a profile
    prior: float
    sd: float
    low: float
    high: float
    source: str
    share_of: str | None = None  # the fitted number is this share of another field's value

    @property
    def label(self) -> str:
        return f"{self.field} / {self.share_of.split('.')[1]}" if self.share_of else self.field


@dataclass(frozen=True)
class FitInputs:
    """Everything a fit uses, as read from a fit file."""

    scenario: str
    model: str
    base_profile: str
    pinned_if_narrowed_by: float
    cpu: CpuCosts
    tool_s: float
    model_error: Mapping[str, float]
    figures: tuple[Figure, ...]
    parameters: tuple[Parameter, ...]
    source: Path

    @property
    def keys(self) -> list[str]:
        """The outcomes the figures are set against, each once, in order of first mention."""
        return list(dict.fromkeys(f.key for f in self.figures))

    @property
    def designs(self) -> list[str]:
        return list(dict.fromkeys(d for f in self.figures for d in (f.baseline, f.design)))


def _require(table: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...] = object) -> Any:
    if key not in table:
        raise FitInputError(f"{where} lacks '{key}'")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise FitInputError(f"{where}: '{key}' = {value!r} is not the expected kind of value")
    return value


def read_inputs(path: Path = FIT_FILE, *, cpu: CpuCosts | None = None) -> FitInputs:
    """A fit file (``data/fits/articles.toml``) read and checked; ``cpu`` replaces its machine's costs.

    >>> inputs = read_inputs()
    >>> inputs.scenario, len(inputs.parameters), inputs.keys[0]
    ('fix-failing-test', 9, 'ttft_cut:sprint/naive')
    """
    try:
        with Path(path).open("rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise FitInputError(f"cannot read the fit file '{path}': {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise FitInputError(f"the fit file '{path}' is not valid TOML: {e}") from None
    number = (int, float)
    setting = _require(raw, "setting", path.name, dict)
    machine = _require(raw, "machine", path.name, dict)
    costs = cpu or CpuCosts(
        **{
            name: _require(machine, key, "[machine]", number) * unit
            for key, (name, unit) in CPU_FIELDS.items()
        }
    )
    figures = []
    for i, table in enumerate(_require(raw, "figure", path.name, list), 1):
        where = f"figure {i}"
        figure = Figure(
            **{
                f.name: _require(table, f.name, where, number if f.type == "float" else str)
                for f in fields(Figure)
            }
        )
        if figure.outcome not in OUTCOMES:
            raise FitInputError(f"{where}: outcome '{figure.outcome}' is not one of {', '.join(OUTCOMES)}")
        if not 0 < figure.tolerance < 1 or not -1 < figure.value < 1:
            raise FitInputError(f"{where}: value and tolerance are shares (0.45 for 45%)")
        figures.append(figure)
    profile_fields = {f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)}
    parameters = []
    for i, table in enumerate(_require(raw, "parameter", path.name, list), 1):
        where = f"parameter {i}"
        parameter = Parameter(
            field=_require(table, "field", where, str),
            prior=float(_require(table, "prior", where, number)),
            sd=float(_require(table, "sd", where, number)),
            low=float(_require(table, "low", where, number)),
            high=float(_require(table, "high", where, number)),
            source=_require(table, "source", where, str),
            share_of=table.get("share_of"),
        )
        for name in filter(None, (parameter.field, parameter.share_of)):
            if name not in profile_fields:
                raise FitInputError(f"{where}: '{name}' is not a profile field (section.name)")
        if not (parameter.low <= parameter.prior <= parameter.high and parameter.sd > 0):
            raise FitInputError(f"{where} ({parameter.field}): needs low <= prior <= high and sd > 0")
        parameters.append(parameter)
    if not figures or not parameters:
        raise FitInputError(f"{path.name} needs at least one [[figure]] and one [[parameter]]")
    keys = {f.key for f in figures}
    error = raw.get("model_error", {})
    unknown = sorted(set(error) - keys)
    if unknown:
        raise FitInputError(f"[model_error] names '{unknown[0]}', which no figure is set against")
    return FitInputs(
        scenario=_require(setting, "scenario", "[setting]", str),
        model=_require(setting, "model", "[setting]", str),
        base_profile=_require(setting, "base_profile", "[setting]", str),
        pinned_if_narrowed_by=float(_require(setting, "pinned_if_narrowed_by", "[setting]", number)),
        cpu=costs,
        tool_s=float(_require(machine, "tool_s", "[machine]", number)),
        model_error={k: float(v) for k, v in error.items()},
        figures=tuple(figures),
        parameters=tuple(parameters),
        source=Path(path),
    )


# ---------------------------------------------------------------- the outcomes, from the cost model


def with_values(base: Profile, parameters: Sequence[Parameter], values: Sequence[float]) -> Profile:
    """``base`` with each parameter's field set (a share multiplies the field it is a share of).

    >>> from labkit.profiles import load_profile
    >>> base = load_profile("production-like", builtin_data_dir())
    >>> p = with_values(base, read_inputs().parameters, [5, 6, 8, 12, 20, 1.0, 0.5, 0.3, 10])
    >>> p.network.rtt_ms, p.safety.fast_hop_ms
    (5, 10.0)
    """
    settled = {p.field: v for p, v in zip(parameters, values, strict=True)}
    for p in parameters:
        if p.share_of:
            of = settled.get(p.share_of, _get(base, p.share_of))
            settled[p.field] = settled[p.field] * of
    profile = base
    for name, value in settled.items():
        section, key = name.split(".")
        profile = replace(profile, **{section: replace(getattr(profile, section), **{key: value})})
    return replace(profile, name="article-fit")


def _get(profile: Profile, name: str) -> float:
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


def predictions(inputs: FitInputs, rollout: Basis, profile: Profile) -> dict[str, Prediction]:
    """The cost model's prediction for each design the figures name."""
    return {
        design: predict(
            design,
            profile,
            rollout.shape,
            decode_tps=rollout.decode_tps,
            prefill_tps=rollout.prefill_tps,
            cpu=inputs.cpu,
        )
        for design in inputs.designs
    }


def outcome(kind: str, design: Prediction, baseline: Prediction) -> float:
    """A saving as a share: of the baseline's mean TTFT (``ttft_cut``) or end to end (``saved``)."""
    if kind == "ttft_cut":
        return 1 - design.mean_ttft / baseline.mean_ttft
    return 1 - design.end_to_end / baseline.end_to_end


def model_outcomes(inputs: FitInputs, rollout: Basis, profile: Profile) -> dict[str, float]:
    """Each outcome the figures are set against, as the cost model gives it for ``profile``, plus
    the model's stated error (``[model_error]``): what a real run is expected to measure."""
    by_design = predictions(inputs, rollout, profile)
    out = {}
    for key in inputs.keys:
        kind, _, pair = key.partition(":")
        design, _, baseline = pair.partition("/")
        out[key] = outcome(kind, by_design[design], by_design[baseline]) + inputs.model_error.get(key, 0.0)
    return out


# ---------------------------------------------------------------- the fit


def _residuals(inputs: FitInputs, rollout: Basis) -> Callable[[np.ndarray], np.ndarray]:
    """z (each parameter as prior + z * sd) -> each figure's miss / tolerance, then z itself (the prior)."""
    prior = np.array([p.prior for p in inputs.parameters])
    sd = np.array([p.sd for p in inputs.parameters])

    def residuals(z: np.ndarray) -> np.ndarray:
        profile = with_values(rollout.base, inputs.parameters, list(prior + z * sd))
        got = model_outcomes(inputs, rollout, profile)
        misses = [(got[f.key] - f.value) / f.tolerance for f in inputs.figures]
        return np.concatenate([misses, z])

    return residuals


def _jacobian(
    f: Callable[[np.ndarray], np.ndarray], z: np.ndarray, r: np.ndarray, h: float = 1e-4
) -> np.ndarray:
    """Forward differences: the cost model is smooth in every delay (sums of hops and per-token costs)."""
    jac = np.empty((len(r), len(z)))
    for i in range(len(z)):
        step = z.copy()
        step[i] += h
        jac[:, i] = (f(step) - r) / h
    return jac


def least_squares(
    f: Callable[[np.ndarray], np.ndarray],
    z0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    iterations: int = 200,
) -> np.ndarray:
    """Minimise ``|f(z)|²`` with ``low <= z <= high``: Levenberg-Marquardt steps, clipped to the
    bounds; a parameter at a bound that the gradient pushes outward is held there for the step.

    >>> g = lambda z: np.array([z[0] - 3.0, z[1] + 1.0])
    >>> least_squares(g, np.zeros(2), np.array([-5.0, 0.0]), np.array([5.0, 5.0])).round(6).tolist()
    [3.0, 0.0]
    """
    z, damping = np.clip(z0, low, high), 1e-3
    r = f(z)
    cost = r @ r
    for _ in range(iterations):
        jac = _jacobian(f, z, r)
        grad = jac.T @ r
        free = ~(((z <= low) & (grad > 0)) | ((z >= high) & (grad < 0)))
        if not free.any():
            break
        a = jac[:, free].T @ jac[:, free]
        step = np.zeros_like(z)
        step[free] = -np.linalg.solve(a + damping * (np.diag(np.diag(a)) + 1e-9 * np.eye(len(a))), grad[free])
        trial = np.clip(z + step, low, high)
        r_trial = f(trial)
        if r_trial @ r_trial < cost:
            moved = np.abs(trial - z).max()
            z, r, cost, damping = trial, r_trial, r_trial @ r_trial, damping / 3
            if moved < 1e-7:
                break
        else:
            damping *= 10
            if damping > 1e10:
                break
    return z


@dataclass
class ArticleFit:
    """A finished fit: the fitted values, the outcomes they give, and how well the figures pin them."""

    inputs: FitInputs
    rollout: Basis
    values: np.ndarray  # one per parameter, in its own unit (a share for share parameters)
    profile: Profile
    outcomes: dict[str, float]  # the model's outcome (with its stated error) for each figure's key
    sensitivity: np.ndarray  # [outcome, parameter]: the outcome's change per prior sd of the parameter
    narrowed: np.ndarray  # per parameter: 1 - posterior sd / prior sd

    @property
    def residuals(self) -> pd.DataFrame:
        """One row per figure: the article's value, the fitted outcome, the miss in points and in
        tolerances."""
        rows = []
        for f in self.inputs.figures:
            got = self.outcomes[f.key]
            rows.append(
                {
                    "figure": f.name,
                    "who": f.who,
                    "compared": f.compared,
                    "article": f.value,
                    "fitted": got,
                    "residual (points)": (got - f.value) * 100,
                    "in tolerances": (got - f.value) / f.tolerance,
                }
            )
        return pd.DataFrame(rows).set_index("figure")

    @property
    def parameters(self) -> pd.DataFrame:
        """One row per parameter: prior, spread, bounds, fitted value, each outcome's sensitivity
        (points per prior sd), how much the figures narrowed the prior, and whether that pins it."""
        rows = []
        for i, p in enumerate(self.inputs.parameters):
            row = {
                "parameter": p.label,
                "prior": p.prior,
                "sd": p.sd,
                "low": p.low,
                "high": p.high,
                "fitted": float(self.values[i]),
                "at bound": bool(np.isclose(self.values[i], p.low) or np.isclose(self.values[i], p.high)),
            }
            for k, key in enumerate(self.inputs.keys):
                row[f"d {key} (points/sd)"] = float(self.sensitivity[k, i]) * 100
            row["narrowed"] = float(self.narrowed[i])
            row["pinned"] = bool(self.narrowed[i] >= self.inputs.pinned_if_narrowed_by)
            rows.append(row)
        return pd.DataFrame(rows).set_index("parameter")

    @property
    def pinned_total(self) -> float:
        """How many unknowns' worth the figures pin down: the sum over parameters of the share of
        each prior's variance they remove. Never more than the number of comparisons the figures
        make (the rank of what they measure), however many figures or unknowns there are."""
        return float(np.sum(1 - (1 - self.narrowed) ** 2))

    def pulled_by(self, i: int, at_least: float = 0.005) -> list[str]:
        """The outcomes that respond to parameter ``i`` by at least half a point per prior sd."""
        return [key for k, key in enumerate(self.inputs.keys) if abs(self.sensitivity[k, i]) >= at_least]


def fit_articles(inputs: FitInputs | None = None) -> ArticleFit:
    """Fit the profile's unknown delays to the articles' figures (see the module's docstring)."""
    inputs = inputs or read_inputs()
    rollout = Basis.of(inputs)
    params = inputs.parameters
    prior = np.array([p.prior for p in params])
    sd = np.array([p.sd for p in params])
    low = (np.array([p.low for p in params]) - prior) / sd
    high = (np.array([p.high for p in params]) - prior) / sd
    f = _residuals(inputs, rollout)
    z = least_squares(f, np.zeros(len(params)), low, high)
    values = prior + z * sd
    profile = with_values(rollout.base, params, list(values))
    jac = _jacobian(f, z, f(z))
    # Outcome sensitivities: the figure rows back in shares (each key once).
    first_row = {f.key: i for i, f in reversed(list(enumerate(inputs.figures)))}
    tolerance = np.array([inputs.figures[first_row[k]].tolerance for k in inputs.keys])
    sensitivity = jac[[first_row[k] for k in inputs.keys]] * tolerance[:, None]
    # The posterior's spread near the fit (Gauss-Newton), prior rows included, in units of the prior's sd.
    posterior = np.sqrt(np.diag(np.linalg.inv(jac.T @ jac)))
    return ArticleFit(
        inputs=inputs,
        rollout=rollout,
        values=values,
        profile=profile,
        outcomes=model_outcomes(inputs, rollout, profile),
        sensitivity=sensitivity,
        narrowed=1 - posterior,
    )


# ---------------------------------------------------------------- the fitted profile, as a file


def _described(path: Path) -> dict[str, list[str]]:
    """Each field's comment lines in a profile file (``section.key`` -> the lines above it)."""
    notes: dict[str, list[str]] = {}
    section, pending = "", []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text.startswith("["):
            section, pending = text.strip("[]"), []
        elif text.startswith("#"):
            pending.append(text)
        elif "=" in text and section:
            notes[f"{section}.{text.split('=')[0].strip()}"] = pending
            pending = []
        else:
            pending = []
    return notes


def _number(value: float) -> str:
    """A profile value: whole numbers as integers, the rest to three decimals.

    >>> _number(20.0), _number(6.34567), _number(0.1), _number(5.0000001)
    ('20', '6.346', '0.1', '5')
    """
    return f"{value:.3f}".rstrip("0").rstrip(".")


def profile_text(fit: ArticleFit) -> str:
    """The fitted profile as a TOML file in ``production-like``'s shape, every number commented
    with where it came from: fitted (to which figures, its prior and bounds, how far the figures
    narrowed it) or kept from the base profile."""
    inputs, base = fit.inputs, fit.rollout.base
    base_path = next(
        p
        for p in (
            default_data_dir() / "profiles" / f"{base.name}.toml",
            builtin_data_dir() / "profiles" / f"{base.name}.toml",
        )
        if p.is_file()
    )
    notes = _described(base_path)
    fitted = {p.field: i for i, p in enumerate(inputs.parameters)}
    names = {f.key: [g.name for g in inputs.figures if g.key == f.key] for f in inputs.figures}
    lines = [
        "# The article-fit latency profile: the service costs under which labkit's cost model",
        f"# gives the articles' figures, as near as its structure allows, on the {inputs.scenario} rollout",
        f"# with {inputs.model}. Written by `labkit fit` from data/fits/{inputs.source.name}: change that",
        "# file and fit again rather than editing the numbers here. Every number is still an",
        "# INPUT to the simulation: what a design saves is never written here.",
        "#",
        "# What the fit reached: the cost model's outcome for this profile (its measured error",
        "# included), against each figure:",
    ]
    for figure, row in fit.residuals.iterrows():
        lines.append(
            f"#   {figure} ({row['who']}, {row['article']:.0%}, {row['compared']}): "
            f"{row['fitted']:.1%}, {row['residual (points)']:+.1f} points"
        )
    lines.append("")
    for section, cls in SECTIONS.items():
        lines.append(f"[{section}]")
        for f in fields(cls):
            name = f"{section}.{f.name}"
            value = _get(fit.profile, name)
            lines += notes.get(name, [])
            if name in fitted:
                lines += _provenance(fit, fitted[name], names)
            else:
                lines.append(f"# Kept from {base.name} (not fitted).")
            lines.append(f"{f.name} = {_number(value)}")
        lines.append("")
    return "\n".join(lines)


def _provenance(fit: ArticleFit, i: int, names: Mapping[str, list[str]]) -> list[str]:
    p, value = fit.inputs.parameters[i], float(fit.values[i])
    unit = "" if p.share_of else " ms"
    what = f"{value:.3g}{unit}" + (f" of {p.share_of.split('.')[1]}" if p.share_of else "")
    where = (
        "at its lower bound"
        if np.isclose(value, p.low)
        else "at its upper bound"
        if np.isclose(value, p.high)
        else "inside its bounds"
    )
    pulls = [
        f"{', '.join(names[key])} ({fit.sensitivity[fit.inputs.keys.index(key), i] * 100:+.1f})"
        for key in fit.pulled_by(i)
    ]
    narrowed = fit.narrowed[i]
    verdict = f"the figures narrow its prior by {narrowed:.0%}" + (
        "" if narrowed >= fit.inputs.pinned_if_narrowed_by else ", so they cannot pin it down"
    )
    text = (
        f"Fitted: {what}, {where}; prior {p.prior:g} ± {p.sd:g}, bounds {p.low:g}-{p.high:g} ({p.source}). "
        "Each figure's outcome moves by, per prior sd: "
        + ("; ".join(pulls) if pulls else "none of them")
        + f" (points); {verdict}."
    )
    return ["# " + line for line in textwrap.wrap(text, 96)]


# ---------------------------------------------------------------- the fit, as text


def format_fit(fit: ArticleFit) -> str:
    """The fit as ``labkit fit`` prints it: each figure's residual, then each parameter."""
    inputs = fit.inputs
    out = [
        f"{inputs.scenario} at {fit.rollout.decode_tps:g} tokens/s ({inputs.model}), "
        f"{len(inputs.figures)} figures, {len(inputs.parameters)} unknowns; from {inputs.source.name}",
        "",
        f"{'figure':<26}{'compared':<34}{'article':>8}{'fitted':>8}{'residual':>10}",
    ]
    for name, row in fit.residuals.iterrows():
        out.append(
            f"{name:<26}{row['compared']:<34}{row['article']:>8.0%}{row['fitted']:>8.1%}"
            f"{row['residual (points)']:>+7.1f} pt"
        )
    keys = inputs.keys
    out += [
        "",
        "points each outcome moves per prior sd of a parameter: "
        + ", ".join(f"[{i + 1}] {k}" for i, k in enumerate(keys)),
        f"{'parameter':<48}{'prior':>12}{'bounds':>12}{'fitted':>9}"
        + "".join(f"{f'[{i + 1}]':>7}" for i in range(len(keys)))
        + f"{'narrowed':>10}",
    ]
    for name, row in fit.parameters.iterrows():
        bound = "*" if row["at bound"] else " "
        pinned = "" if row["pinned"] else "  not pinned"
        out.append(
            f"{name:<48}{f'{row.prior:g} ± {row.sd:g}':>12}{f'{row.low:g}-{row.high:g}':>12}"
            f"{row.fitted:>8.3g}{bound}"
            + "".join(f"{row[f'd {k} (points/sd)']:>+7.1f}" for k in keys)
            + f"{row.narrowed:>10.0%}{pinned}"
        )
    out.append(
        f"(* at a bound; 'not pinned': the figures narrow its prior by less than "
        f"{inputs.pinned_if_narrowed_by:.0%}; altogether they pin {fit.pinned_total:.2f} of the "
        f"{len(inputs.parameters)} unknowns' worth, at most {len(keys)}: one per comparison)"
    )
    return "\n".join(out)
