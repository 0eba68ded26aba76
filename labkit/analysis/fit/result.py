"""The fit itself: penalised least squares of the chosen figures and the priors, and what it found.

Each chosen figure's miss counts in units of its tolerance, each unknown's distance from its
prior in units of its spread; the sum of squares is minimised within the bounds. The result
holds every figure's residual (fitted or held out), how strongly each outcome responds to each
unknown, and how much the fitted figures narrowed each prior: one they barely narrow is one
they cannot pin down.

    >>> fit = fit_articles()
    >>> sorted(fit.outcomes) == sorted({f.key for f in fit.inputs.figures}), fit.figures
    (True, 'fitted')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from labkit.analysis.fit.inputs import Figure, FitInputs, read_inputs
from labkit.analysis.fit.outcomes import Basis, model_outcomes, with_values
from labkit.analysis.fit.solver import Residuals, jacobian, least_squares
from labkit.profiles import Profile


@dataclass
class ArticleFit:
    """A finished fit: the fitted values, the outcomes they give, and how well the figures pin them."""

    inputs: FitInputs
    figures: str  # which figures it was fitted to: "fitted" (those marked so) or "all"
    rollout: Basis
    values: np.ndarray  # one per parameter, in its own unit (a share for share parameters)
    profile: Profile
    outcomes: dict[str, float]  # each outcome as a real run is expected to measure it
    sensitivity: np.ndarray  # [outcome, parameter]: the outcome's change per prior sd of the parameter
    narrowed: np.ndarray  # per parameter: 1 - posterior sd / prior sd

    @property
    def fitted_to(self) -> tuple[Figure, ...]:
        return self.inputs.chosen(self.figures)

    @property
    def fitted_keys(self) -> list[str]:
        """The comparisons the fit used, each once."""
        return list(dict.fromkeys(f.key for f in self.fitted_to))

    @property
    def residuals(self) -> pd.DataFrame:
        """One row per figure, fitted or held out: the article's value, the fitted outcome, the miss
        in points and in tolerances, and the reason the figure is fitted or held out."""
        rows = []
        for f in self.inputs.figures:
            got = self.outcomes[f.key]
            rows.append(
                {
                    "figure": f.name,
                    "who": f.who,
                    "compared": f.compared,
                    "role": "fitted" if f in self.fitted_to else "held out",
                    "article": f.value,
                    "fitted": got,
                    "residual (points)": (got - f.value) * 100,
                    "in tolerances": (got - f.value) / f.tolerance,
                    "reason": f.reason,
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
    def unknowns(self) -> pd.DataFrame:
        """``parameters`` in plain words, one row per unknown: its unit, labkit's guess and its
        leeway (how far the fit may move it at ease: the prior's spread), the fitted value, then
        for each outcome the percentage points it moves when the unknown rises by its leeway, the
        share of the leeway the fitted figures leave, and whether they set it (cut its leeway by at
        least ``pinned_if_narrowed_by``). ``labkit.analysis.tables.styled`` shows it by its units."""
        table = self.parameters
        compared = {
            key: next(f.compared for f in self.inputs.figures if f.key == key) for key in self.inputs.keys
        }
        out = pd.DataFrame(
            {
                "unit": [f"share of {p.share_of}" if p.share_of else "ms" for p in self.inputs.parameters],
                "guess": table["prior"],
                "leeway (±)": table["sd"],
                "fitted": table["fitted"],
                **{f"{compared[key]} (points)": table[f"d {key} (points/sd)"] for key in self.inputs.keys},
                "leeway left (%)": 1 - table["narrowed"],
                "set by the figures": table["pinned"].map({True: "yes", False: "no"}),
            },
            index=table.index,
        )
        out.index.name = "unknown"
        return out

    @property
    def pinned_total(self) -> float:
        """How many unknowns' worth the figures pin down: the sum over parameters of the share of
        each prior's variance they remove. Never more than the number of comparisons the fitted
        figures make (the rank of what they measure), however many figures or unknowns there are."""
        return float(np.sum(1 - (1 - self.narrowed) ** 2))

    def pulled_by(self, i: int, at_least: float = 0.005) -> list[str]:
        """The outcomes that respond to parameter ``i`` by at least half a point per prior sd."""
        return [key for k, key in enumerate(self.inputs.keys) if abs(self.sensitivity[k, i]) >= at_least]


def fit_articles(inputs: FitInputs | None = None, *, figures: str = "fitted") -> ArticleFit:
    """Fit the profile's unknown delays to the chosen figures (``"fitted"``: those the fit file
    marks so; ``"all"``: every figure), within the bounds, near the priors."""
    inputs = inputs or read_inputs()
    chosen = inputs.chosen(figures)
    basis = Basis.of(inputs)
    params = inputs.parameters
    prior = np.array([p.prior for p in params])
    sd = np.array([p.sd for p in params])
    low = (np.array([p.low for p in params]) - prior) / sd
    high = (np.array([p.high for p in params]) - prior) / sd

    def settled(z: np.ndarray) -> Profile:
        return with_values(basis.base, params, list(prior + z * sd))

    def misses(z: np.ndarray) -> np.ndarray:
        """z (each parameter as prior + z * sd) -> each chosen figure's miss / tolerance, then z."""
        got = model_outcomes(inputs, basis, settled(z))
        return np.concatenate([[(got[f.key] - f.value) / f.tolerance for f in chosen], z])

    def every_outcome(z: np.ndarray) -> np.ndarray:
        got = model_outcomes(inputs, basis, settled(z))
        return np.array([got[key] for key in inputs.keys])

    z = least_squares(misses, np.zeros(len(params)), low, high)
    profile = settled(z)
    return ArticleFit(
        inputs=inputs,
        figures=figures,
        rollout=basis,
        values=prior + z * sd,
        profile=profile,
        outcomes=model_outcomes(inputs, basis, profile),
        sensitivity=_slopes(every_outcome, z),
        narrowed=1 - _posterior_sd(misses, z),
    )


def _slopes(f: Residuals, z: np.ndarray) -> np.ndarray:
    """Each outcome's change per prior sd of each parameter, at ``z``."""
    return jacobian(f, z, f(z))


def _posterior_sd(misses: Residuals, z: np.ndarray) -> np.ndarray:
    """Each parameter's spread near the fit, in units of its prior's (Gauss-Newton: the prior's
    rows are in ``misses``, so this is 1 where no chosen figure sees the parameter)."""
    jac = jacobian(misses, z, misses(z))
    return np.sqrt(np.diag(np.linalg.inv(jac.T @ jac)))
