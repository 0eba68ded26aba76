"""``labkit replay FILE``: a recorded session (Codex CLI JSONL or a transcript) through every design.

A file that cannot be replayed is one line naming its line and what was expected, and exit 2,
before any server starts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from labkit.cli.checks import CommandError, check_models, check_profile, design_names, positive_count, speeds
from labkit.designs import DESIGNS
from labkit.engine.catalogue import REPLAY_MODELS, builtin_speeds
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE

HELP = "replay a recorded session (a Codex CLI rollout-*.jsonl, or a transcript) through every design"


def replay_command(args: argparse.Namespace) -> None:
    source = Path(args.file)
    if not source.is_file():
        raise CommandError(f"cannot read '{args.file}': no such file")
    check_profile(args.profile, default_data_dir())
    check_models(None)  # $LABKIT_MODELS reaches the server replay starts
    from labkit.analysis.compare import rows_json, stderr_progress
    from labkit.analysis.replay import replay
    from labkit.cli.compare import format_tables
    from labkit.scenarios.recording import ReplayError

    try:
        result = replay(
            source,
            tps=args.tps,
            designs=args.designs,
            repeat=args.repeat,
            profile=args.profile,
            progress=stderr_progress,
        )
    except ReplayError as e:
        raise CommandError(f"{source.name}: {e}") from None
    except OSError as e:
        raise CommandError(f"cannot read '{args.file}': {e.strerror or e}") from None
    print(json.dumps(rows_json(result.rows), indent=2) if args.json else format_tables(result.rows))


def add_replay_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """``labkit replay``'s arguments, on the ``labkit`` command's subparsers."""
    r = sub.add_parser("replay", help=HELP, description=HELP, formatter_class=formatter)
    r.add_argument("file", metavar="FILE", help="a Codex CLI session (JSON Lines) or a transcript")
    r.add_argument(
        "--tps",
        type=speeds,
        default=",".join(map(str, builtin_speeds(REPLAY_MODELS))),
        help="decode speeds in tokens/s, comma-separated",
    )
    r.add_argument(
        "--designs",
        type=design_names,
        default=",".join(DESIGNS),
        metavar="SPECS",
        help="designs to run, comma-separated: names or composed specs",
    )
    r.add_argument(
        "--repeat", type=positive_count, default=1, metavar="N", help="replays per design and speed (median)"
    )
    r.add_argument(
        "--profile", default=DEFAULT_PROFILE, metavar="NAME", help="latency profile: a name or a TOML file"
    )
    r.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    r.set_defaults(func=replay_command, command_parser=r)
