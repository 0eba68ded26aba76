"""The fitted profile as a TOML file in the base profile's shape, every number commented with
where it came from: fitted (its prior and bounds, the outcomes it moves, how far the fitted
figures narrowed it) or kept from the base profile.

    >>> from labkit.analysis.fit.result import fit_articles
    >>> text = profile_text(fit_articles())
    >>> text.count("# Fitted: "), "Kept from production-like (not fitted)." in text
    (9, True)
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

import numpy as np

from labkit.analysis.fit.outcomes import field_value
from labkit.analysis.fit.result import ArticleFit
from labkit.paths import builtin_data_dir, default_data_dir
from labkit.profiles import SECTIONS


def profile_text(fit: ArticleFit) -> str:
    """The file ``labkit fit --out`` writes."""
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
    names = {key: [f.name for f in inputs.figures if f.key == key] for key in inputs.keys}
    chosen = ", ".join(f"{f.name} ({f.who})" for f in fit.fitted_to)
    lines = [
        "# The article-fit latency profile: the service costs under which labkit's cost model",
        f"# gives the articles' figures on the {inputs.scenario} rollout with {inputs.model}.",
        f"# Written by `labkit fit` from data/fits/{inputs.source.name}: change that file and fit",
        "# again rather than editing the numbers here. Every number is still an INPUT to the",
        "# simulation: what a design saves is never written here.",
        "#",
        *textwrap.wrap(f"Fitted to: {chosen}.", 92, initial_indent="# ", subsequent_indent="# "),
        *_reading_lines(fit),
        "# What the fit expects a run to measure (the cost model, plus what a run spends beyond",
        "# it), against every figure, fitted or held out:",
    ]
    for figure, row in fit.residuals.iterrows():
        lines.append(
            f"#   {figure} ({row['who']}, {row['article']:.0%}, {row['compared']}, {row['role']}): "
            f"{row['fitted']:.1%}, {row['residual (points)']:+.1f} points"
        )
    lines.append("")
    for section, cls in SECTIONS.items():
        lines.append(f"[{section}]")
        for f in fields(cls):
            name = f"{section}.{f.name}"
            lines += notes.get(name, [])
            if name in fitted:
                lines += _provenance(fit, fitted[name], names)
            else:
                lines.append(f"# Kept from {base.name} (not fitted).")
            lines.append(f"{f.name} = {_number(field_value(fit.profile, name))}")
        lines.append("")
    return "\n".join(lines)


def _reading_lines(fit: ArticleFit) -> list[str]:
    """The reading of the figures whose baseline no source states, if any figure has one."""
    inputs = fit.inputs
    read = [f.name for f in inputs.figures if f.read_as]
    if not read:
        return []
    text = (
        f"No source states the baseline of {', '.join(read)}: read as '{inputs.reading}', "
        f"{inputs.readings[inputs.reading].means}."
    )
    return textwrap.wrap(text, 92, initial_indent="# ", subsequent_indent="# ")


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
    verdict = f"the fitted figures narrow its prior by {narrowed:.0%}" + (
        "" if narrowed >= fit.inputs.pinned_if_narrowed_by else ", so they cannot pin it down"
    )
    text = (
        f"Fitted: {what}, {where}; prior {p.prior:g} ± {p.sd:g}, bounds {p.low:g}-{p.high:g} ({p.source}). "
        "Each figure's outcome moves by, per prior sd: "
        + ("; ".join(pulls) if pulls else "none of them")
        + f" (points); {verdict}."
    )
    return ["# " + line for line in textwrap.wrap(text, 96)]
