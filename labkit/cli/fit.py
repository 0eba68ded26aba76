"""``labkit fit``: fit the profile's unknown delays to the articles' figures, print the fit, and
write the fitted profile.

By default the fit uses the figures the fit file marks fitted and reports the held-out ones'
residuals beside them; ``--figures all`` fits to every figure, to show how they pull against
each other; ``--reading`` reads the figures whose baseline no source states another way. A fit
file that cannot be used, or a path the profile cannot be written to, is one line and exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from labkit.cli.checks import CommandError

HELP = "fit the service's unknown delays to the articles' figures; print the residuals, write a profile"


def fit_command(args: argparse.Namespace) -> None:
    from labkit.analysis.cost_model import CpuCosts
    from labkit.analysis.fit import (
        FIT_FILE,
        FitInputError,
        fit_articles,
        format_fit,
        profile_text,
        read_inputs,
    )

    out = Path(args.out) if args.out else None
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        where = "is a directory" if out.is_dir() else "is in a folder that does not exist"
        raise CommandError(f"--out '{args.out}' {where}; pass the path of a .toml file to write")
    if out is not None and out.suffix != ".toml":
        raise CommandError(f"--out '{args.out}' must end in .toml (labkit reads profiles from TOML files)")
    try:
        cpu = CpuCosts.measure() if args.cpu == "here" else None
        inputs = read_inputs(Path(args.inputs) if args.inputs else FIT_FILE, cpu=cpu, reading=args.reading)
        fit = fit_articles(inputs, figures=args.figures)
    except FitInputError as e:
        raise CommandError(str(e)) from None
    print(format_fit(fit))
    if out is None:
        print("\n(pass --out FILE.toml to write the fitted profile)")
        return
    try:
        out.write_text(profile_text(fit) + "\n", encoding="utf-8")
    except OSError as e:
        raise CommandError(f"cannot write '{args.out}': {e.strerror or e}") from None
    print(f"\nwrote {out} (use it with --profile {out})")


def add_fit_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """``labkit fit``'s arguments, on the ``labkit`` command's subparsers."""
    f = sub.add_parser("fit", help=HELP, description=HELP, formatter_class=formatter)
    f.add_argument("--out", metavar="FILE", help="write the fitted profile here (a .toml file)")
    f.add_argument(
        "--inputs",
        metavar="FILE",
        help="the figures, priors, bounds and fixed inputs (default: labkit's data/fits/articles.toml)",
    )
    f.add_argument(
        "--figures",
        metavar="WHICH",
        default="fitted",
        help="'fitted': fit to the figures the fit file marks fitted, the others held out (default); "
        "'all': fit to every figure",
    )
    f.add_argument(
        "--reading",
        metavar="NAME",
        help="how to read the figures whose baseline no source states: one of the fit file's readings "
        "(labkit's: after-sprint, the integrators against the HTTP API after the sprint; or "
        "before-sprint, against the API before it)",
    )
    f.add_argument(
        "--cpu",
        choices=["stated", "here"],
        default="stated",
        help="price the real CPU work with the fit file's stated costs, or measure this machine's",
    )
    f.set_defaults(func=fit_command, command_parser=f)
