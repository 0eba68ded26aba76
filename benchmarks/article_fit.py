"""The article fit against measured rollouts: the outcomes the fit predicts, and what
``labkit compare`` measures, for ``production-like`` and for ``article-fit``.

First this machine's CPU costs (median of five ``CpuCosts.measure()``, printed as the fit
file's ``[machine]`` lines) and the rollout's tool time (median of five); then, for each
profile, the designs the figures compare, run at the fit's model speed: the profiles take
turns, one run each per round, so any drift of the machine touches both alike; the tables
show medians. For each outcome: the cost model's as the fit prices it (the fit file's
stated CPU costs, tool time and model error), the model's with this machine's CPU costs
and tool time (no stated error), the measurement, and the model's error (measured minus
the fit's model without its stated error). That error, on ``production-like``, is what
the fit file's ``[model_error]`` states.

    python benchmarks/article_fit.py
    python benchmarks/article_fit.py --repeat 5 --profiles production-like
    python benchmarks/article_fit.py --search     # how close any setting in the bounds gets

``--search`` measures nothing: it looks for the setting within the fit's bounds (no priors)
whose worst miss over the three comparisons is smallest (the integrators' figures as their
middle, 35%, or as Cursor's 30%): 1,500 random points, then a shrinking random local search
from the best, seeded.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import fields, replace

import numpy as np

from labkit.analysis.article_fit import CPU_FIELDS, Basis, FitInputs, model_outcomes, read_inputs, with_values
from labkit.analysis.compare import compare, stderr_progress
from labkit.analysis.cost_model import CpuCosts, Shape
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.scenarios import load_scenario


def median_costs(runs: int = 5) -> CpuCosts:
    measured = [CpuCosts.measure() for _ in range(runs)]
    return CpuCosts(
        **{f.name: statistics.median(getattr(m, f.name) for m in measured) for f in fields(CpuCosts)}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profiles", default="production-like,article-fit")
    parser.add_argument("--search", action="store_true", help="only the closest-setting search")
    args = parser.parse_args()
    if args.search:
        for integrators in (0.35, 0.30):
            search(read_inputs(), integrators)
        return

    inputs = read_inputs()
    here = median_costs()
    print("[machine] as measured here (median of 5):")
    for key, (name, unit) in CPU_FIELDS.items():
        print(f"{key} = {getattr(here, name) / unit:.3g}")
    basis = Basis.of(inputs)
    scenario = load_scenario(inputs.scenario, default_data_dir())
    tools = statistics.median(sum(t.tool_s for t in Shape.of(scenario).turns) for _ in range(5))
    print(f"tool_s = {tools:.3g} (the fit file states {inputs.tool_s:.3g})")

    profiles = args.profiles.split(",")
    designs = inputs.designs
    runs: dict[str, list] = {p: [] for p in profiles}
    for n in range(args.repeat):
        for profile in profiles:
            stderr_progress(f"round {n + 1}/{args.repeat}: {profile}")
            runs[profile].append(compare(tps=[basis.decode_tps], profile=profile, designs=designs))

    print(f"\n{inputs.scenario} at {basis.decode_tps:g} tokens/s, medians of {args.repeat}")
    here_inputs = replace(inputs, cpu=here, model_error={}, tool_s=tools)
    here_basis = Basis.of(here_inputs)
    for profile in profiles:
        loaded = replace(load_profile(profile, default_data_dir()), name=profile)
        stated = model_outcomes(inputs, basis, loaded)
        local = model_outcomes(here_inputs, here_basis, loaded)
        medians = {
            d: {
                "e2e": statistics.median(r.e2e_s for rows in runs[profile] for r in rows if r.design == d),
                "ttft": statistics.median(
                    r.ttft_mean_s for rows in runs[profile] for r in rows if r.design == d
                ),
            }
            for d in designs
        }
        print(
            f"\n{profile}: "
            + ", ".join(f"{d} {m['e2e']:.2f} s / {m['ttft'] * 1000:.0f} ms" for d, m in medians.items())
        )
        print(f"{'outcome':<26}{'model':>8}{'model here':>12}{'measured':>10}{'error':>13}  articles")
        for key in inputs.keys:
            kind, _, pair = key.partition(":")
            design, _, baseline = pair.partition("/")
            metric = "ttft" if kind == "ttft_cut" else "e2e"
            measured = 1 - medians[design][metric] / medians[baseline][metric]
            figures = ", ".join(f"{f.who} {f.value:.0%}" for f in inputs.figures if f.key == key)
            print(
                f"{key:<26}{stated[key]:>8.1%}{local[key]:>12.1%}{measured:>10.1%}"
                f"{(measured - stated[key] + inputs.model_error.get(key, 0.0)) * 100:>+11.1f} pt  {figures}"
            )


def search(inputs: FitInputs, integrators: float, seed: int = 1) -> None:
    basis, params = Basis.of(inputs), inputs.parameters
    low, high = np.array([p.low for p in params]), np.array([p.high for p in params])
    targets = {f.key: f.value for f in inputs.figures if f.design != "websocket" or f.baseline != "sprint"}
    targets["saved:websocket/sprint"] = integrators

    def worst(x: np.ndarray) -> tuple[float, dict[str, float]]:
        got = model_outcomes(inputs, basis, with_values(basis.base, params, list(x)))
        return max(abs(got[k] - v) for k, v in targets.items()), got

    rng = np.random.default_rng(seed)
    best = min(
        ((*worst(x), x) for x in low + (high - low) * rng.random((1500, len(params)))), key=lambda t: t[0]
    )
    miss, got, x = best
    step = (high - low) * 0.1
    for i in range(400):
        y = np.clip(x + step * rng.normal(size=len(x)), low, high)
        m, g = worst(y)
        if m < miss:
            miss, got, x = m, g, y
        elif i % 50 == 49:
            step *= 0.6
    shown = ", ".join(f"{k} {v:.1%}" for k, v in got.items())
    print(f"integrators at {integrators:.0%}: smallest worst miss {miss * 100:.1f} points ({shown})")


if __name__ == "__main__":
    main()
