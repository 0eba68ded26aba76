"""The ``labkit`` command: ``labkit serve`` runs the Responses API server; ``labkit compare``
runs every design side by side and prints what each one cost.

Every mistake on the command line ends in one line on stderr and a non-zero exit, never a
traceback: argparse's own errors and the checks below exit 2, a port that cannot be bound exits 1.
Arguments are checked here, before any server starts, because errors raised later (in the
app's lifespan, or in the server process ``compare`` starts) arrive as tracebacks.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from labkit import __version__
from labkit.cli.checks import CommandError
from labkit.cli.compare import add_compare_parser
from labkit.cli.doctor import doctor_command
from labkit.cli.fit import add_fit_parser
from labkit.cli.replay import add_replay_parser
from labkit.cli.serve import add_serve_parser

DESCRIPTION = (
    "labkit: a Responses API server on a simulated inference engine. "
    "'labkit serve' runs the server (HTTP, SSE and WebSocket mode); "
    "'labkit compare' runs every design side by side and prints what each one cost."
)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), pointing at --help."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())  # argparse's messages may wrap; the line must not
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except None and a flag's False, which say nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="labkit", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument(
        "--version", action="version", version=f"labkit {__version__}", help="print labkit's version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)  # subparsers are Parsers too

    add_serve_parser(sub, HelpFormatter)

    add_compare_parser(sub, HelpFormatter)
    add_replay_parser(sub, HelpFormatter)
    add_fit_parser(sub, HelpFormatter)

    doctor_help = "check this machine is ready for the workshop: Python, install, notebooks, timer, CPU"
    d = sub.add_parser("doctor", help=doctor_help, description=doctor_help, formatter_class=HelpFormatter)
    d.add_argument("--skip-smoke", action="store_true", help="skip the short rollout against a real server")
    d.set_defaults(func=doctor_command, command_parser=d)
    # Named in "the following arguments are required: ..." when no command is given.
    sub.metavar = "{" + ",".join(sub.choices) + "}"
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the command's parser, so the hint names its --help
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        args.func(args)
    except CommandError as e:
        print(f"{args.command_parser.prog}: error: {e}", file=sys.stderr)
        sys.exit(e.status)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
