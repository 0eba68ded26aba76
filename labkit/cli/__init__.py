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
from labkit.cli.checks import CommandError, design_spec, port_number, positive_count
from labkit.cli.compare import add_compare_parser
from labkit.cli.doctor import doctor_command
from labkit.cli.fit import add_fit_parser
from labkit.cli.replay import add_replay_parser
from labkit.cli.serve import DEFAULT_HOST, DEFAULT_PORT, add_connection_cache_flag, add_limit_flags, serve
from labkit.designs import DESIGNS
from labkit.profiles import DEFAULT_PROFILE

DESCRIPTION = (
    "labkit: a Responses API server on a simulated inference engine. "
    "'labkit serve' runs the server (HTTP, SSE and WebSocket mode); "
    "'labkit compare' runs every design side by side and prints what each one cost."
)
LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]  # uvicorn's names


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

    serve_help = "run the Responses API server (HTTP, SSE and WebSocket mode)"
    p = sub.add_parser("serve", help=serve_help, description=serve_help, formatter_class=HelpFormatter)
    p.add_argument("--host", default=DEFAULT_HOST, help="address to listen on")
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        metavar="PORT",
        help="port to listen on; 0 picks a free one",
    )
    p.add_argument(
        "--db", metavar="PATH", help="SQLite file for stored responses (default: $LABKIT_DB or user data dir)"
    )
    p.add_argument(
        "--models", metavar="FILE", help="TOML file adding or overriding models (or $LABKIT_MODELS)"
    )
    p.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help="require this bearer key (repeatable; also $LABKIT_API_KEYS, comma-separated)",
    )
    p.add_argument(
        "--instructor-key",
        action="append",
        metavar="KEY",
        help="a key that may watch every key's traces at /v1/labkit/traces/stream (repeatable; "
        "also $LABKIT_INSTRUCTOR_KEYS)",
    )
    p.add_argument(
        "--allow-no-keys",
        action="store_true",
        help="serve on a non-loopback --host without API keys (refused otherwise)",
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        metavar="NAME",
        help="latency profile: a name in data/profiles or a TOML file",
    )
    p.add_argument(
        "--design",
        type=design_spec,
        metavar="SPEC",
        help=f"default design for every request: one of {', '.join(DESIGNS)}, or one composed "
        "of a design and +parts, e.g. naive+render_cache (default: sprint over HTTP, "
        "websocket over WebSocket)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=LOG_LEVELS,
        metavar="LEVEL",
        help=f"uvicorn's log level, one of {', '.join(LOG_LEVELS)}",
    )
    p.add_argument(
        "--workers",
        type=positive_count,
        default=1,
        metavar="N",
        help="server processes sharing the port, for a bigger room: stored responses and billing "
        "are shared through --db; each worker has its own connections, engine, caches and traces",
    )
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="shut down when standard input closes: the process that started the server has exited, "
        "even if it was killed",
    )
    p.add_argument(
        "--remove-with-parent",
        metavar="DIR",
        help="with --exit-with-parent: remove this folder (the parent's temporary one) once the "
        "parent is gone and the server has stopped",
    )
    add_limit_flags(p)  # one per field of labkit.limits.ServerLimits
    add_connection_cache_flag(p)
    p.set_defaults(func=serve, command_parser=p)

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
