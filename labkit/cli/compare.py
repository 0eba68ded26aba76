"""``labkit compare``: every design on one scenario at several model speeds, side by side.

The designs take turns turn by turn on one server, as the notebooks' rollouts do
(``labkit.analysis.compare.run_designs``); this module reads the command line and prints the
tables. A mistake on the command line is one line and exit 2, before any server starts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from labkit.cli.checks import (
    check_models,
    check_profile,
    check_scenario,
    design_names,
    positive_count,
    speeds,
)
from labkit.designs import DESIGNS
from labkit.engine.catalogue import builtin_speeds
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE
from labkit.scenarios import DEFAULT_SCENARIO, SYNTHETIC, SYNTHETIC_DEFAULTS

if TYPE_CHECKING:
    from labkit.analysis.compare import Row

HELP = "run every design on one scenario at several model speeds"


def compare_command(args: argparse.Namespace) -> None:
    data_dir = default_data_dir()
    check_scenario(args.scenario, data_dir)
    check_profile(args.profile, data_dir)
    check_models(None)  # $LABKIT_MODELS reaches the server compare starts
    from labkit.analysis.compare import rows_json, run_designs, stderr_progress

    rows = run_designs(
        tps=args.tps,
        scenario=args.scenario,
        profile=args.profile,
        repeat=args.repeat,
        designs=args.designs,
        fresh_connection=args.fresh_connection,
        data_dir=data_dir,
        progress=stderr_progress,
    )
    print(json.dumps(rows_json(rows), indent=2) if args.json else format_tables(rows))


def format_tables(rows: Sequence[Row]) -> str:
    """One table per speed, as ``labkit compare`` prints it."""
    out = []
    for speed in dict.fromkeys(r.tps for r in rows):
        group = [r for r in rows if r.tps == speed]
        runs = sorted({r.runs for r in group})
        counted = str(runs[0]) if len(runs) == 1 else f"{runs[0]} to {runs[-1]}"
        out.append(
            f"\n{group[0].model} ({speed:g} tokens/s), median of {counted} run(s); "
            "saved and cut: against naive"
        )
        out.append(
            f"{'design':<10}{'end to end':>12}{'saved':>8}{'mean TTFT':>11}{'cut':>7}{'API share':>11}"
        )
        for r in group:
            out.append(
                f"{r.design:<10}{r.e2e_s:>10.2f} s{r.saved_vs_naive:>8.0%}"
                f"{r.ttft_mean_s * 1000:>8.0f} ms{r.ttft_cut_vs_naive:>7.0%}{r.api_share:>11.0%}"
            )
    return "\n".join(out)


def add_compare_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """``labkit compare``'s arguments, on the ``labkit`` command's subparsers."""
    c = sub.add_parser("compare", help=HELP, description=HELP, formatter_class=formatter)
    c.add_argument(
        "--tps",
        type=speeds,
        default=",".join(map(str, builtin_speeds())),
        help="decode speeds in tokens/s, comma-separated",
    )
    c.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME",
        help=f"a scenario in data/scenarios, or {SYNTHETIC}:KEY=N,... "
        f"with keys {', '.join(SYNTHETIC_DEFAULTS)}",
    )
    c.add_argument(
        "--profile", default=DEFAULT_PROFILE, metavar="NAME", help="latency profile: a name or a TOML file"
    )
    c.add_argument(
        "--repeat",
        type=positive_count,
        default=3,
        metavar="N",
        help="rollouts per design and speed; the tables show their median",
    )
    c.add_argument(
        "--designs",
        type=design_names,
        default=",".join(DESIGNS),
        metavar="SPECS",
        help="designs to run, comma-separated: names or composed specs, e.g. naive,naive+render_cache",
    )
    c.add_argument(
        "--fresh-connection", action="store_true", help="HTTP designs: a new connection per request"
    )
    c.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    c.set_defaults(func=compare_command, command_parser=c)
