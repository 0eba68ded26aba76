"""The article fit against measured rollouts: its fixed inputs measured on this machine, and
the fitted profile's outcomes measured beside what the fit expects.

``--inputs`` measures what the fit file states as fixed inputs: each round times this
machine's CPU work (``CpuCosts.measure()``) and the rollout's tools (``Shape.of``), then runs
naive, the sprint and WebSocket mode on ``production-like`` at the fit's model speed. It
prints the fit file's ``[machine]`` lines (medians over the rounds) and its ``[unmodeled]``
lines: per design, what the runs spent beyond the cost model priced with those medians
(mean TTFT, and end to end per turn). ``production-like``, never the fitted profile: that
run is the fit's check. The load average is printed before and after each round.

The default is the check: ``production-like`` and ``article-fit`` take turns, one run each
per round, so any drift of the machine touches both alike; medians over the rounds. For each
outcome: what the fit expects (the fit file's stated inputs), what was measured, and the
articles' figures. For ``production-like`` it also prints what the runs spent beyond the
model in this run, beside what the fit file states.

    python benchmarks/article_fit.py --inputs --repeat 7
    python benchmarks/article_fit.py --repeat 5
    python benchmarks/article_fit.py --search     # how close any setting in the bounds gets

``--search`` measures nothing: for a set of target figures, it looks for the setting within
the fit's bounds (no priors) whose worst miss is smallest: 1,500 random points, then a
shrinking random local search from the best, seeded.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import fields, replace

import numpy as np

from labkit.analysis.compare import run_designs, stderr_progress
from labkit.analysis.cost_model import CpuCosts, Shape
from labkit.analysis.fit.inputs import CPU_FIELDS, FitInputs, Unmodeled, read_inputs
from labkit.analysis.fit.outcomes import Basis, model_outcomes, predictions, with_values
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.scenarios import load_scenario

METRICS = {"ttft_cut": "ttft", "saved": "e2e"}


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def median_costs(measured: list[CpuCosts]) -> CpuCosts:
    return CpuCosts(
        **{f.name: statistics.median(getattr(m, f.name) for m in measured) for f in fields(CpuCosts)}
    )


def run_rounds(
    inputs: FitInputs, profiles: list[str], rounds: int
) -> tuple[dict, list[CpuCosts], list[float]]:
    """Each round: this machine's CPU costs and tools' time, then each profile's designs once."""
    basis = Basis.of(inputs)
    scenario = load_scenario(inputs.scenario, default_data_dir())
    runs: dict[str, list[dict]] = {p: [] for p in profiles}
    costs, tools = [], []
    for n in range(rounds):
        stderr_progress(f"round {n + 1}/{rounds}: {load()}")
        costs.append(CpuCosts.measure())
        tools.append(sum(t.tool_s for t in Shape.of(scenario).turns))
        for profile in profiles:
            rows = run_designs(tps=[basis.decode_tps], profile=profile, designs=inputs.designs)
            runs[profile].append({r.design: {"ttft": r.ttft_mean_s, "e2e": r.e2e_s} for r in rows})
            stderr_progress(
                f"  {profile}: "
                + ", ".join(
                    f"{d} {m['e2e']:.2f} s / {m['ttft'] * 1000:.0f} ms" for d, m in runs[profile][-1].items()
                )
            )
    stderr_progress(f"done: {load()}")
    return runs, costs, tools


def medians(runs: list[dict]) -> dict[str, dict[str, float]]:
    designs = runs[0]
    return {d: {m: statistics.median(r[d][m] for r in runs) for m in ("ttft", "e2e")} for d in designs}


def unmodeled(inputs: FitInputs, profile: str, measured: dict[str, dict[str, float]]) -> dict[str, Unmodeled]:
    """Per design, what the runs spent beyond the cost model (priced with ``inputs``' machine)."""
    loaded = replace(load_profile(profile, default_data_dir()), name=profile)
    priced = predictions(inputs, Basis.of(inputs), loaded)
    return {
        d: Unmodeled(
            ttft_s=measured[d]["ttft"] - p.mean_ttft,
            turn_s=(measured[d]["e2e"] - p.end_to_end) / len(p),
        )
        for d, p in priced.items()
    }


def measure_inputs(inputs: FitInputs, rounds: int) -> None:
    runs, costs, tools = run_rounds(inputs, ["production-like"], rounds)
    here = replace(inputs, cpu=median_costs(costs), tool_s=statistics.median(tools), unmodeled={})
    print(f"\n[machine] (medians of {rounds} rounds)")
    for key, (name, unit) in CPU_FIELDS.items():
        print(f"{key} = {getattr(here.cpu, name) / unit:.3g}")
    print(f"tool_s = {here.tool_s:.3g}")
    for design, extra in unmodeled(here, "production-like", medians(runs["production-like"])).items():
        print(f"\n[unmodeled.{design}]")
        print(f"ttft_ms = {extra.ttft_s * 1000:.1f}\nturn_ms = {extra.turn_s * 1000:.1f}")


def check(inputs: FitInputs, profiles: list[str], rounds: int) -> None:
    runs, _, _ = run_rounds(inputs, profiles, rounds)
    basis = Basis.of(inputs)
    print(f"\n{inputs.scenario} at {basis.decode_tps:g} tokens/s, medians of {rounds} rounds")
    for profile in profiles:
        measured = medians(runs[profile])
        expected = model_outcomes(
            inputs, basis, replace(load_profile(profile, default_data_dir()), name=profile)
        )
        print(
            f"\n{profile}: "
            + ", ".join(f"{d} {m['e2e']:.2f} s / {m['ttft'] * 1000:.0f} ms" for d, m in measured.items())
        )
        print(
            f"{'outcome':<26}{'expected':>10}{'measured':>10}{'difference':>12}  articles (measured's miss)"
        )
        for key in inputs.keys:
            kind, _, pair = key.partition(":")
            design, _, baseline = pair.partition("/")
            metric = METRICS[kind]
            got = 1 - measured[design][metric] / measured[baseline][metric]
            figures = ", ".join(
                f"{f.who} {f.value:.0%} ({(got - f.value) * 100:+.1f})"
                for f in inputs.figures
                if f.key == key
            )
            difference = (got - expected[key]) * 100
            print(f"{key:<26}{expected[key]:>10.1%}{got:>10.1%}{difference:>+9.1f} pt  {figures}")
        if profile == inputs.base_profile:
            print("beyond the model, per design (this run / the fit file), ms: TTFT, per turn")
            for design, extra in unmodeled(inputs, profile, measured).items():
                stated = inputs.unmodeled.get(design, Unmodeled(0.0, 0.0))
                print(
                    f"  {design:<10}{extra.ttft_s * 1000:>+7.1f} / {stated.ttft_s * 1000:+.1f}"
                    f"{extra.turn_s * 1000:>+9.1f} / {stated.turn_s * 1000:+.1f}"
                )


def search(inputs: FitInputs, targets: dict[str, float], seed: int = 1) -> tuple[float, dict[str, float]]:
    basis, params = Basis.of(inputs), inputs.parameters
    low, high = np.array([p.low for p in params]), np.array([p.high for p in params])

    def worst(x: np.ndarray) -> tuple[float, dict[str, float]]:
        got = model_outcomes(inputs, basis, with_values(basis.base, params, list(x)))
        return max(abs(got[k] - v) for k, v in targets.items()), got

    rng = np.random.default_rng(seed)
    miss, got, x = min(
        ((*worst(x), x) for x in low + (high - low) * rng.random((1500, len(params)))), key=lambda t: t[0]
    )
    step = (high - low) * 0.1
    for i in range(400):
        y = np.clip(x + step * rng.normal(size=len(x)), low, high)
        m, g = worst(y)
        if m < miss:
            miss, got, x = m, g, y
        elif i % 50 == 49:
            step *= 0.6
    return miss, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--profiles", default="production-like,article-fit")
    parser.add_argument("--inputs", action="store_true", help="measure the fit file's fixed inputs")
    parser.add_argument("--search", action="store_true", help="only the closest-setting search")
    args = parser.parse_args()
    inputs = read_inputs()
    if args.inputs:
        measure_inputs(inputs, args.repeat)
    elif args.search:
        fitted = {f.key: f.value for f in inputs.chosen("fitted")}
        integrators = "saved:websocket/sprint"
        sets = (
            ("the fitted figures", {}),
            ("and 35%", {integrators: 0.35}),
            ("and 30%", {integrators: 0.30}),
        )
        for name, extra in sets:
            miss, got = search(inputs, {**fitted, **extra})
            shown = ", ".join(f"{k} {v:.1%}" for k, v in got.items())
            print(f"{name}: smallest worst miss {miss * 100:.1f} points ({shown})")
    else:
        check(inputs, args.profiles.split(","), args.repeat)


if __name__ == "__main__":
    main()
