"""The ``labkit`` command: ``labkit serve`` runs the Responses API server; ``labkit compare``
runs every design side by side and prints what each one cost.

Every mistake on the command line ends in one line on stderr and a non-zero exit, never a
traceback: argparse's own errors and the checks below exit 2, a port that cannot be bound exits 1.
Arguments are checked here, before any server starts, because errors raised later (in the
app's lifespan, or in the server process ``compare`` starts) arrive as tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import math
import os
import socket
import sqlite3
import sys
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from labkit import __version__
from labkit.designs import DESIGNS, DesignSpecError, compose
from labkit.engine.catalogue import BUILTIN_MODELS, MODELS_ENV, load_catalogue
from labkit.paths import default_data_dir
from labkit.scenarios import SYNTHETIC, SYNTHETIC_DEFAULTS, ScenarioNotFound, load_scenario
from labkit.server.auth import keys_from_env
from labkit.server.profiles import DEFAULT_PROFILE, known_profiles, load_profile

READY_LINE = "labkit: serving on http://{host}:{port}/v1"
DESCRIPTION = (
    "labkit: a Responses API server on a simulated inference engine. "
    "'labkit serve' runs the server (HTTP, SSE and WebSocket mode); "
    "'labkit compare' runs every design side by side and prints what each one cost."
)
LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]  # uvicorn's names


class CommandError(Exception):
    """A mistake in a command's arguments, found before anything starts: one line, then exit."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


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


# Argument types: their ArgumentTypeError messages become "argument --X: MESSAGE".


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port '{text}': use 0 to 65535, where 0 picks a free port")
    return port


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def positive_number(text: str) -> float:
    value = _positive(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid value '{text}': use a positive number")
    return value


def positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count '{text}': use a whole number, 1 or more")
    return value


def speeds(text: str) -> list[float]:
    values = [_positive(part) for part in text.split(",")]
    bad = [part for part, value in zip(text.split(","), values, strict=True) if value is None]
    if bad:
        raise argparse.ArgumentTypeError(
            f"invalid decode speed '{bad[0].strip()}': decode speeds must be positive numbers "
            "in tokens/s, comma-separated, e.g. 65,1000,4000"
        )
    return [v for v in values if v is not None]


def design_spec(text: str) -> str:
    """A design's name or composed spec, as its canonical name.

    >>> design_spec("naive+fast_classifiers+render_cache")
    'naive+render_cache+fast_classifiers'
    """
    try:
        return compose(text.strip()).name
    except DesignSpecError as exc:  # argparse turns it into one line and exit 2
        raise argparse.ArgumentTypeError(str(exc)) from None


def design_names(text: str) -> list[str]:
    return [design_spec(name) for name in text.split(",")]


# Checks that need files: run by each command before it starts a server.


def check_profile(name: str, data_dir: Path) -> None:
    names = known_profiles(data_dir)
    known = ", ".join(names)
    if Path(name).suffix == ".toml":  # a path, as load_profile reads it
        if not Path(name).is_file():
            raise CommandError(
                f"--profile file '{name}' does not exist; name a known profile ({known}) or a TOML file"
            )
    elif name not in names:
        raise CommandError(f"unknown profile '{name}' for --profile; known profiles: {known}")
    try:
        load_profile(name, data_dir)
    except (ValueError, OSError) as e:  # TOMLDecodeError is a ValueError
        raise CommandError(f"--profile '{name}' is not a valid profile: {e}") from None


def _builtin_models() -> str:
    with BUILTIN_MODELS.open("rb") as f:
        return ", ".join(sorted(tomllib.load(f)["models"]))


def check_models(path_text: str | None) -> None:
    """The --models file (or $LABKIT_MODELS), read here so a bad one is one line, not a
    traceback from the server's lifespan."""
    source = "--models"
    if not path_text:
        path_text, source = os.environ.get(MODELS_ENV), f"${MODELS_ENV}"
    if not path_text:
        return
    path, builtin = Path(path_text), _builtin_models()
    where = f"{source} file '{path_text}'"
    shape = "[models.NAME] tables, each with decode_tps and prefill_tps in tokens/s"
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise CommandError(f"{where} {what}; pass a TOML file of {shape}; built-in models: {builtin}")
    try:
        with path.open("rb") as f:
            tables: Any = tomllib.load(f).get("models")
    except OSError as e:
        raise CommandError(f"{where} cannot be read: {e.strerror}") from None
    except ValueError as e:  # TOMLDecodeError, or bytes that are not UTF-8
        raise CommandError(f"{where} is not valid TOML: {e}") from None
    if not isinstance(tables, dict) or not tables:
        raise CommandError(f"{where} defines no models; expected {shape}; built-in models: {builtin}")
    for name, fields in tables.items():
        if not isinstance(fields, dict):
            raise CommandError(f"{where}: 'models.{name}' must be a table like [models.{name}]")
        for key in ("decode_tps", "prefill_tps"):
            value = fields.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise CommandError(f"{where}: model '{name}' has {key} = {value!r}; use a positive number")
    try:
        load_catalogue(path)
    except ValueError as e:  # a new model lacking a speed: only built-in models may omit fields
        raise CommandError(
            f"{where}: {e} (built-in models, which may override one field: {builtin})"
        ) from None


def check_db(db: str) -> None:
    """Open the SQLite file once, as the server's lifespan would, to report a bad --db here."""
    if db == ":memory:":
        return
    path = Path(db)
    if path.is_dir():
        raise CommandError(f"--db '{db}' is a directory; pass the path of a SQLite file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(path).close()
    except (OSError, sqlite3.Error) as e:
        reason = e.strerror if isinstance(e, OSError) else str(e)
        raise CommandError(
            f"cannot open the database '{db}': {reason}; pass another path with --db"
        ) from None


def check_scenario(name: str, data_dir: Path) -> None:
    example = f"{SYNTHETIC}:" + ",".join(f"{k}={v}" for k, v in SYNTHETIC_DEFAULTS.items())
    try:
        load_scenario(name, data_dir)
    except ScenarioNotFound as e:
        if name == SYNTHETIC or name.startswith(f"{SYNTHETIC}:"):
            raise CommandError(
                f"--scenario '{name}': {e}; each takes a whole number, "
                f"e.g. {SYNTHETIC}:turns=20,tool_tokens=1000"
            ) from None
        known = ", ".join(sorted(p.stem for p in (data_dir / "scenarios").glob("*.json"))) or "none"
        raise CommandError(
            f"unknown scenario '{name}' for --scenario; known scenarios: {known}, "
            f"or {example} (a generated one; give any of its parameters)"
        ) from None
    except ValueError as e:  # synthetic() refusing a size, or a scenario file that is not JSON
        raise CommandError(f"--scenario '{name}': {e}") from None
    except (KeyError, OSError) as e:
        raise CommandError(
            f"--scenario '{name}': its file cannot be used ({type(e).__name__}: {e})"
        ) from None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_keys(host: str, keys: list[str], *, allow_no_keys: bool) -> None:
    """A server others can reach needs keys: without them anyone on the network could use it,
    and every request would share one anonymous owner (and so see each other's responses)."""
    bad = next((key for key in keys if not (key.isascii() and key.isprintable())), None)
    if bad is not None:
        raise CommandError("an API key (--api-key or $LABKIT_API_KEYS) must be printable ASCII")
    if keys or _is_loopback(host):
        return
    if not allow_no_keys:
        raise CommandError(
            f"refusing to serve on --host {host} without API keys: anyone who can reach it could "
            "use it and read every response; pass --api-key KEY (or set LABKIT_API_KEYS), "
            "or --allow-no-keys to serve it open anyway"
        )
    print(
        f"labkit: warning: serving on {host} with no API keys (--allow-no-keys); anyone who can "
        "reach this port can use the server and read every response.",
        file=sys.stderr,
    )


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port; a failure is one line saying what to change."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # proto=IPPROTO_TCP matters: asyncio only turns Nagle's algorithm off (TCP_NODELAY) for
        # sockets that say they are TCP, and Nagle plus delayed ACKs holds small frames for 40 ms.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as e:
        raise CommandError(f"cannot open a socket for {host}: {e.strerror or e}", status=1) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise CommandError(_bind_problem(e, host, port), status=1) from None
    return sock


def _bind_problem(e: OSError, host: str, port: int) -> str:
    if isinstance(e, socket.gaierror):
        return f"cannot resolve --host '{host}' ({e.strerror}); pass an IP address such as 127.0.0.1"
    if e.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is already in use; pick another with --port (0 picks a free one)"
    if e.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {host}: it is not an address of this machine; pick another with --host "
            "(127.0.0.1 for this machine only, 0.0.0.0 for every interface)"
        )
    if e.errno == errno.EACCES:
        return f"no permission to listen on port {port} on {host}; pick a port above 1024 with --port"
    return f"cannot listen on {host}:{port}: {e.strerror or e}"


def serve(args: argparse.Namespace) -> None:
    data_dir = default_data_dir()
    check_profile(args.profile, data_dir)
    check_models(args.models)
    # Imported only now: the server's modules take most of a second to load, which every
    # mistake caught above (and every --help) would otherwise wait for.
    import uvicorn

    from labkit.server.app import ServerConfig, create_app
    from labkit.server.network import TrackedH11Protocol
    from labkit.server.trace_stream import instructor_keys_from_env

    config = ServerConfig(
        api_keys=(args.api_key or []) + keys_from_env(),
        ws_lifetime_s=args.ws_lifetime,
        models=args.models,
        profile=args.profile,
        design=args.design,
        data_dir=data_dir,
        instructor_keys=(args.instructor_key or []) + instructor_keys_from_env(),
        max_body_bytes=args.max_body_bytes,
        max_frame_bytes=args.max_frame_bytes,
        max_output_tokens=args.max_output_tokens,
        max_queued_creates=args.max_queued_creates,
        max_traces=args.max_traces,
        max_connections_per_key=args.max_connections_per_key,
        max_requests_per_key=args.max_requests_per_key,
    )
    if args.db:
        config.db = args.db
    check_db(config.db)
    if args.workers > 1 and config.db == ":memory:":
        raise CommandError(
            "--workers shares stored responses and billing through the database file; "
            "with --db :memory: each worker would have its own, so pass a file with --db"
        )
    check_keys(args.host, config.api_keys, allow_no_keys=args.allow_no_keys)
    # Bind first, so the port (even 0, "any free port") is known before announcing readiness.
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            log_level=args.log_level,
            lifespan="on",
            ws_ping_interval=None,
            ws_max_size=args.max_frame_bytes,  # a larger frame is refused: close code 1009
            http=TrackedH11Protocol,
        )
    )

    if args.workers > 1:
        from labkit.server.workers import WorkersError, serve_workers

        try:
            serve_workers(server, sock, args.workers, config.db, READY_LINE.format(host=args.host, port=port))
        except WorkersError as e:
            raise CommandError(str(e), status=1) from None
        return

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(READY_LINE.format(host=args.host, port=port), flush=True)
        await task

    asyncio.run(run())


def compare_command(args: argparse.Namespace) -> None:
    data_dir = default_data_dir()
    check_scenario(args.scenario, data_dir)
    check_profile(args.profile, data_dir)
    check_models(None)  # $LABKIT_MODELS reaches the server compare starts
    import json

    from labkit.analysis.compare import compare, format_tables, rows_json, stderr_progress

    rows = compare(
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="labkit", description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument(
        "--version", action="version", version=f"labkit {__version__}", help="print labkit's version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)  # subparsers are Parsers too

    serve_help = "run the Responses API server (HTTP, SSE and WebSocket mode)"
    p = sub.add_parser("serve", help=serve_help, description=serve_help, formatter_class=HelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--port", type=port_number, default=8765, metavar="PORT", help="port to listen on; 0 picks a free one"
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
        "--ws-lifetime",
        type=positive_number,
        default=3600.0,
        metavar="SECONDS",
        help="how long a WebSocket connection may stay open",
    )
    p.add_argument(
        "--allow-no-keys",
        action="store_true",
        help="serve on a non-loopback --host without API keys (refused otherwise)",
    )
    # Limits for a room of clients (docs/protocol.md, "Limits").
    p.add_argument(
        "--max-body-bytes",
        type=positive_count,
        default=2 * 1024 * 1024,
        metavar="N",
        help="largest HTTP request body; a larger one is a 413",
    )
    p.add_argument(
        "--max-frame-bytes",
        type=positive_count,
        default=2 * 1024 * 1024,
        metavar="N",
        help="largest WebSocket frame; a larger one closes the socket with code 1009",
    )
    p.add_argument(
        "--max-output-tokens",
        type=positive_count,
        default=32_768,
        metavar="N",
        help="the longest answer the simulated model writes, whatever the request asks for",
    )
    p.add_argument(
        "--max-queued-creates",
        type=positive_count,
        default=16,
        metavar="N",
        help="creates waiting on one WebSocket connection; more are refused (websocket_queue_full)",
    )
    p.add_argument(
        "--max-traces",
        type=positive_count,
        default=10_000,
        metavar="N",
        help="responses whose spans are kept in memory for /v1/labkit/traces",
    )
    p.add_argument(
        "--max-connections-per-key",
        type=positive_count,
        metavar="N",
        help="open WebSocket connections per key; more are refused with 429 (default: no cap)",
    )
    p.add_argument(
        "--max-requests-per-key",
        type=positive_count,
        metavar="N",
        help="requests in flight per key (HTTP requests and WebSocket responses); more are a 429 "
        "(default: no cap)",
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
    p.set_defaults(func=serve, command_parser=p)

    compare_help = "run every design on one scenario at several model speeds"
    c = sub.add_parser("compare", help=compare_help, description=compare_help, formatter_class=HelpFormatter)
    c.add_argument(
        "--tps", type=speeds, default="65,1000,4000", help="decode speeds in tokens/s, comma-separated"
    )
    c.add_argument(
        "--scenario",
        default="fix-failing-test",
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
