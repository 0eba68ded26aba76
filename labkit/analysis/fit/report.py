"""A fit as ``labkit fit`` prints it: every figure's residual, fitted or held out (with why),
then each unknown: its prior, bounds, fitted value, how each outcome moves with it, and
whether the fitted figures pin it down.

    >>> from labkit.analysis.fit.result import fit_articles
    >>> text = format_fit(fit_articles())
    >>> "held out" in text and "not pinned" in text
    True
"""

from __future__ import annotations

import textwrap

from labkit.analysis.fit.result import ArticleFit


def format_fit(fit: ArticleFit) -> str:
    inputs = fit.inputs
    chosen = fit.fitted_to
    out = [
        f"{inputs.scenario} at {fit.rollout.decode_tps:g} tokens/s ({inputs.model}), "
        f"{len(inputs.parameters)} unknowns fitted to {len(chosen)} of {len(inputs.figures)} figures "
        f"({'all' if fit.figures == 'all' else 'those marked fitted'} in {inputs.source.name})",
        "",
        f"{'figure':<26}{'compared':<34}{'role':<10}{'article':>8}{'fitted':>8}{'residual':>10}",
    ]
    for name, row in fit.residuals.iterrows():
        out.append(
            f"{name:<26}{row['compared']:<34}{row['role']:<10}{row['article']:>8.0%}{row['fitted']:>8.1%}"
            f"{row['residual (points)']:>+7.1f} pt"
        )
    read = [f for f in inputs.figures if f.read_as]
    if read:
        reading = inputs.readings[inputs.reading]
        text = (
            f"{', '.join(f.name for f in read)}: no source states the baseline; read as "
            f"'{inputs.reading}' ({reading.means}; other readings: "
            f"{', '.join(r for r in inputs.readings if r != inputs.reading) or 'none'}, with --reading)"
        )
        out += ["", *textwrap.wrap(text, 100)]
    held_out = [f for f in inputs.figures if f not in chosen]
    if held_out:
        out += ["", "held out (their residuals are what this fit predicts for them):"]
        reasons = dict.fromkeys(f.reason for f in held_out)
        for reason in reasons:
            who = ", ".join(f.name for f in held_out if f.reason == reason)
            out += textwrap.wrap(f"{who}: {reason}", 100, initial_indent="  ", subsequent_indent="    ")
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
    loose = [name for name, row in fit.parameters.iterrows() if not row["pinned"]]
    out.append(
        f"(* at a bound; 'not pinned': the fitted figures narrow its prior by less than "
        f"{inputs.pinned_if_narrowed_by:.0%}; together they pin {fit.pinned_total:.2f} of the "
        f"{len(inputs.parameters)} unknowns' worth, at most {len(fit.fitted_keys)}: "
        "one per comparison fitted)"
    )
    if loose:
        base = fit.rollout.base.name
        text = f"The fitted figures cannot pin down {', '.join(loose)}: each stays near {base}'s guess."
        out += ["", *textwrap.wrap(text, 100)]
    return "\n".join(out)
