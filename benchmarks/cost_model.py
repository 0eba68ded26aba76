"""The analytic cost model against measured rollouts, side by side in one run.

Runs ``labkit compare`` on a scenario at one speed (default: the default
scenario at 1,000 tokens/s, median of 3 rollouts per design), evaluates the
cost model for the same profile, scenario and speed, and prints both with the
model's error. The cost model's CPU coefficients are measured on this machine
first (``CpuCosts.measure``); nothing in it is fitted to the rollouts.

    python benchmarks/cost_model.py
    python benchmarks/cost_model.py --tps 4000 --repeat 5
"""

from __future__ import annotations

import argparse
import json

from labkit.analysis.compare import models_for, run_designs, stderr_progress
from labkit.analysis.cost_model import end_to_end, mean_ttft, predict
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.shape import Shape
from labkit.engine.catalogue import load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE, load_profile
from labkit.scenarios import DEFAULT_SCENARIO, load_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--tps", type=float, default=1000)
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    data = default_data_dir()
    cpu = CpuCosts.measure()
    shape = Shape.of(load_scenario(args.scenario, data))
    profile = load_profile(args.profile, data)
    catalogue = load_catalogue()
    name = models_for([args.tps], catalogue)[0][args.tps]
    prefill = catalogue.models[name].prefill_tps if name in catalogue.models else None

    rows = run_designs(
        tps=[args.tps],
        scenario=args.scenario,
        profile=args.profile,
        repeat=args.repeat,
        progress=stderr_progress,
    )
    out = []
    for row in rows:
        costs = predict(
            row.design, profile, shape, decode_tps=args.tps, prefill_tps=prefill or 50_000, cpu=cpu
        )
        out.append(
            {
                "design": row.design,
                "measured_e2e_s": row.e2e_s,
                "model_e2e_s": end_to_end(costs),
                "e2e_error": end_to_end(costs) / row.e2e_s - 1,
                "measured_ttft_s": row.ttft_mean_s,
                "model_ttft_s": mean_ttft(costs),
                "ttft_error": mean_ttft(costs) / row.ttft_mean_s - 1,
            }
        )
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"\nCPU costs measured here: scan {cpu.scan_s_per_token * 1e6:.2f} ms and tokenize "
        f"{cpu.tokenize_s_per_token * 1e6:.2f} ms per 1k tokens; the SDK builds a request in "
        f"{cpu.http_request_s * 1e3:.1f} ms (HTTP) or {cpu.ws_request_s * 1e3:.1f} ms (WebSocket) "
        f"+ {cpu.client_s_per_sent_item * 1e3:.2f} ms per item; a sleep wakes "
        f"{cpu.timer_overrun_s * 1e3:.2f} ms late"
    )
    print(f"{args.scenario} at {args.tps:g} tokens/s, profile {args.profile}, median of {args.repeat}")
    print(f"{'design':<10}{'measured':>10}{'model':>9}{'error':>8}{'TTFT meas.':>12}{'model':>8}{'error':>8}")
    for r in out:
        measured_ms, model_ms = r["measured_ttft_s"] * 1000, r["model_ttft_s"] * 1000
        print(
            f"{r['design']:<10}{r['measured_e2e_s']:>8.2f} s{r['model_e2e_s']:>7.2f} s{r['e2e_error']:>+8.1%}"
            f"{measured_ms:>9.0f} ms{model_ms:>5.0f} ms{r['ttft_error']:>+8.1%}"
        )


if __name__ == "__main__":
    main()
