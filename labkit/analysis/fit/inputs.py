"""What a fit uses, read from one file (``data/fits/articles.toml``) and checked.

The figures (each with what its sources say it was measured against, marked fitted or held out,
with the reason), the unknown delays with their priors and bounds, and the fixed inputs: the
rollout, this machine's CPU costs and tools' time, and what a real run of each design spends
beyond the cost model. A file that cannot be used is a ``FitInputError``: one line saying what
is wrong.

Where no source states a figure's baseline, the file gives one per **reading** (``[reading.*]``:
what it means and why one would read the figure so) and a fit uses one of them: labkit's own,
``[setting] reading``, unless asked for another.

    >>> inputs = read_inputs()
    >>> inputs.scenario, len(inputs.parameters), [f.who for f in inputs.chosen("fitted")]
    ('fix-failing-test', 9, ['OpenAI', 'OpenAI'])
    >>> inputs.reading, [f.baseline for f in inputs.figures]
    ('after-sprint', ['naive', 'naive', 'sprint', 'sprint', 'sprint'])
    >>> [f.baseline for f in read_inputs(reading="before-sprint").figures]
    ['naive', 'naive', 'naive', 'naive', 'naive']
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from labkit.analysis.cost_model import CpuCosts
from labkit.paths import builtin_data_dir
from labkit.profiles import SECTIONS

FIT_FILE = builtin_data_dir() / "fits" / "articles.toml"
OUTCOMES = ("ttft_cut", "saved")  # 1 - mean TTFT (or end to end) of the design / of the baseline
FIGURE_SETS = ("fitted", "all")  # fit to the figures marked fitted, or to every figure
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
NUMBER = (int, float)


class FitInputError(ValueError):
    """A fit file that cannot be used: one line saying what is wrong."""


@dataclass(frozen=True)
class Reading:
    """One way of reading the figures whose baseline no source states: what it takes them to
    compare, and why one would read them so."""

    name: str
    means: str
    why: str


@dataclass(frozen=True)
class Figure:
    """One published number, the comparison it was measured on, and whether the fit uses it."""

    name: str
    who: str
    quote: str
    stated: str  # what the sources say it was measured against ("no baseline" where none does)
    outcome: str  # one of OUTCOMES
    design: str
    baseline: str  # the stated one, or the reading's (``read_as``)
    value: float
    tolerance: float
    fitted: bool  # False: held out, its residual reported but not fitted to
    reason: str  # why it is fitted or held out
    read_as: str | None = None  # the reading its baseline comes from; None where a source states it

    @property
    def compared(self) -> str:
        """What was compared, in words: ``websocket vs sprint, end to end``."""
        return f"{self.design} vs {self.baseline}, {'TTFT' if self.outcome == 'ttft_cut' else 'end to end'}"

    @property
    def key(self) -> str:
        """The outcome it is set against, e.g. ``saved:websocket/sprint``."""
        return f"{self.outcome}:{self.design}/{self.baseline}"

    @property
    def role(self) -> str:
        return "fitted" if self.fitted else "held out"


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
class Unmodeled:
    """What a real run of one design spends beyond the cost model, per turn (seconds): before
    the first token (in TTFT), and over the whole turn (in end to end)."""

    ttft_s: float
    turn_s: float


@dataclass(frozen=True)
class FitInputs:
    """Everything a fit uses, as read from a fit file."""

    scenario: str
    model: str
    base_profile: str
    pinned_if_narrowed_by: float
    cpu: CpuCosts
    tool_s: float
    unmodeled: Mapping[str, Unmodeled]  # by design; a design not named has none
    figures: tuple[Figure, ...]
    parameters: tuple[Parameter, ...]
    source: Path
    reading: str  # the reading in force for figures whose baseline no source states
    readings: Mapping[str, Reading]

    def chosen(self, figures: str = "fitted") -> tuple[Figure, ...]:
        """The figures a fit uses: those marked fitted, or ``"all"``."""
        if figures not in FIGURE_SETS:
            raise FitInputError(f"figures '{figures}' is not one of {', '.join(FIGURE_SETS)}")
        return self.figures if figures == "all" else tuple(f for f in self.figures if f.fitted)

    @property
    def keys(self) -> list[str]:
        """The outcomes the figures are set against, each once, in order of first mention."""
        return list(dict.fromkeys(f.key for f in self.figures))

    @property
    def designs(self) -> list[str]:
        return designs_of(self.figures)


def designs_of(figures: tuple[Figure, ...]) -> list[str]:
    """The designs some figure compares, each once, baselines first."""
    return list(dict.fromkeys(d for f in figures for d in (f.baseline, f.design)))


def _require(table: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...] = object) -> Any:
    if key not in table:
        raise FitInputError(f"{where} lacks '{key}'")
    value = table[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise FitInputError(f"{where}: '{key}' = {value!r} is not the expected kind of value")
    return value


def _by_reading(
    table: Mapping[str, Any], key: str, where: str, readings: Mapping[str, Reading], reading: str
) -> tuple[str, str | None]:
    """A figure's value that may depend on the reading: one string, or a table with one per reading.
    Returns the value for ``reading``, and the reading's name if it was a choice (else None)."""
    value = _require(table, key, where, (str, dict))
    if isinstance(value, str):
        return value, None
    if set(value) != set(readings) or not all(isinstance(v, str) for v in value.values()):
        raise FitInputError(
            f"{where}: '{key}' needs one text per reading ({', '.join(readings)}), not {sorted(value)}"
        )
    return value[reading], reading


def _figure(table: Mapping[str, Any], where: str, readings: Mapping[str, Reading], reading: str) -> Figure:
    text = {name: _require(table, name, where, str) for name in ("name", "who", "quote", "stated", "outcome")}
    baseline, read_as = _by_reading(table, "baseline", where, readings, reading)
    figure = Figure(
        **text,
        design=_require(table, "design", where, str),
        baseline=baseline,
        value=float(_require(table, "value", where, NUMBER)),
        tolerance=float(_require(table, "tolerance", where, NUMBER)),
        fitted=_require(table, "fitted", where, bool),
        reason=_by_reading(table, "reason", where, readings, reading)[0],
        read_as=read_as,
    )
    if figure.outcome not in OUTCOMES:
        raise FitInputError(f"{where}: outcome '{figure.outcome}' is not one of {', '.join(OUTCOMES)}")
    if not 0 < figure.tolerance < 1 or not -1 < figure.value < 1:
        raise FitInputError(f"{where}: value and tolerance are shares (0.45 for 45%)")
    return figure


def _parameter(table: Mapping[str, Any], where: str, profile_fields: set[str]) -> Parameter:
    parameter = Parameter(
        field=_require(table, "field", where, str),
        prior=float(_require(table, "prior", where, NUMBER)),
        sd=float(_require(table, "sd", where, NUMBER)),
        low=float(_require(table, "low", where, NUMBER)),
        high=float(_require(table, "high", where, NUMBER)),
        source=_require(table, "source", where, str),
        share_of=table.get("share_of"),
    )
    for name in filter(None, (parameter.field, parameter.share_of)):
        if name not in profile_fields:
            raise FitInputError(f"{where}: '{name}' is not a profile field (section.name)")
    if not (parameter.low <= parameter.prior <= parameter.high and parameter.sd > 0):
        raise FitInputError(f"{where} ({parameter.field}): needs low <= prior <= high and sd > 0")
    return parameter


def _unmodeled(table: Mapping[str, Any], designs: list[str]) -> dict[str, Unmodeled]:
    unknown = sorted(set(table) - set(designs))
    if unknown:
        raise FitInputError(f"[unmodeled] names design '{unknown[0]}', which no figure compares")
    return {
        design: Unmodeled(
            ttft_s=_require(per_turn, "ttft_ms", f"[unmodeled.{design}]", NUMBER) / 1000,
            turn_s=_require(per_turn, "turn_ms", f"[unmodeled.{design}]", NUMBER) / 1000,
        )
        for design, per_turn in table.items()
    }


def _readings(raw: Mapping[str, Any], name: str) -> dict[str, Reading]:
    tables = raw.get("reading", {})
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise FitInputError(f"{name}: each reading is a [reading.NAME] table (means, why)")
    return {
        key: Reading(
            key,
            _require(t, "means", f"[reading.{key}]", str),
            _require(t, "why", f"[reading.{key}]", str),
        )
        for key, t in tables.items()
    }


def read_inputs(
    path: Path = FIT_FILE, *, cpu: CpuCosts | None = None, reading: str | None = None
) -> FitInputs:
    """A fit file read and checked; ``cpu`` replaces its machine's costs; ``reading`` (one of the
    file's ``[reading.*]``) replaces its ``[setting] reading``.

    >>> read_inputs().figures[0].key
    'ttft_cut:sprint/naive'
    """
    try:
        with Path(path).open("rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise FitInputError(f"cannot read the fit file '{path}': {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise FitInputError(f"the fit file '{path}' is not valid TOML: {e}") from None
    name = Path(path).name
    setting = _require(raw, "setting", name, dict)
    machine = _require(raw, "machine", name, dict)
    costs = cpu or CpuCosts(
        **{
            field: _require(machine, key, "[machine]", NUMBER) * unit
            for key, (field, unit) in CPU_FIELDS.items()
        }
    )
    readings = _readings(raw, name)
    reading = reading or (_require(setting, "reading", "[setting]", str) if readings else "")
    if (reading or readings) and reading not in readings:
        known = ", ".join(readings) or "none: it has no [reading.*] tables"
        raise FitInputError(f"reading '{reading}' is not one of {name}'s readings ({known})")
    figures = tuple(
        _figure(t, f"figure {i}", readings, reading)
        for i, t in enumerate(_require(raw, "figure", name, list), 1)
    )
    profile_fields = {f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)}
    parameters = tuple(
        _parameter(t, f"parameter {i}", profile_fields)
        for i, t in enumerate(_require(raw, "parameter", name, list), 1)
    )
    if not parameters or not any(f.fitted for f in figures):
        raise FitInputError(f"{name} needs at least one [[parameter]] and one [[figure]] marked fitted")
    return FitInputs(
        scenario=_require(setting, "scenario", "[setting]", str),
        model=_require(setting, "model", "[setting]", str),
        base_profile=_require(setting, "base_profile", "[setting]", str),
        pinned_if_narrowed_by=float(_require(setting, "pinned_if_narrowed_by", "[setting]", NUMBER)),
        cpu=costs,
        tool_s=float(_require(machine, "tool_s", "[machine]", NUMBER)),
        unmodeled=_unmodeled(raw.get("unmodeled", {}), designs_of(figures)),
        figures=figures,
        parameters=parameters,
        source=Path(path),
        reading=reading,
        readings=readings,
    )
