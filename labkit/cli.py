"""The ``labkit`` command: ``labkit serve`` runs the Responses API server; ``labkit compare``
runs every design side by side and prints what each one cost."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import socket
import sys

import uvicorn

from labkit.server.app import ServerConfig, create_app
from labkit.server.auth import keys_from_env
from labkit.server.designs import DESIGNS
from labkit.server.network import TrackedH11Protocol
from labkit.server.profiles import DEFAULT_PROFILE

READY_LINE = "labkit: serving on http://{host}:{port}/v1"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(args: argparse.Namespace) -> None:
    config = ServerConfig(
        api_keys=(args.api_key or []) + keys_from_env(),
        ws_lifetime_s=args.ws_lifetime,
        models=args.models,
        profile=args.profile,
        design=args.design,
    )
    if args.db:
        config.db = args.db
    if not _is_loopback(args.host) and not config.api_keys:
        print(
            f"labkit: warning: serving on {args.host} with no API keys; anyone who can reach "
            "this port can use the server. Pass --api-key or set LABKIT_API_KEYS.",
            file=sys.stderr,
        )
    # Bind first, so the port (even 0, "any free port") is known before announcing readiness.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only turns Nagle's algorithm off (TCP_NODELAY) for
    # sockets that say they are TCP, and Nagle plus delayed ACKs holds small frames for 40 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            log_level=args.log_level,
            lifespan="on",
            ws_ping_interval=None,
            http=TrackedH11Protocol,
        )
    )

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(READY_LINE.format(host=args.host, port=port), flush=True)
        await task

    asyncio.run(run())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the Responses API server (HTTP, SSE and WebSocket mode)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    p.add_argument("--db", help="SQLite file for stored responses (default: $LABKIT_DB or user data dir)")
    p.add_argument("--models", help="TOML file adding or overriding models (or $LABKIT_MODELS)")
    p.add_argument(
        "--api-key",
        action="append",
        help="require this bearer key (repeatable; also $LABKIT_API_KEYS, comma-separated)",
    )
    p.add_argument(
        "--ws-lifetime",
        type=float,
        default=3600.0,
        help="seconds a WebSocket connection may stay open (default 3600)",
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"latency profile: a name in data/profiles or a TOML file (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--design",
        choices=sorted(DESIGNS),
        help="default design for every request (default: sprint over HTTP, websocket over WebSocket)",
    )
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=serve)

    c = sub.add_parser("compare", help="run every design on one scenario at several model speeds")
    c.add_argument("--tps", default="65,1000,4000", help="decode speeds, comma-separated (tokens/s)")
    c.add_argument("--scenario", default="fix-failing-test", help="a scenario name, or synthetic:...")
    c.add_argument("--profile", default=DEFAULT_PROFILE, help="latency profile (name or TOML file)")
    c.add_argument("--repeat", type=int, default=1, help="rollouts per design and speed; the median")
    c.add_argument("--designs", default=",".join(DESIGNS), help="designs to run, comma-separated")
    c.add_argument(
        "--fresh-connection", action="store_true", help="HTTP designs: a new connection per request"
    )
    c.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    c.set_defaults(func=compare_command)
    return parser


def compare_command(args: argparse.Namespace) -> None:
    import json

    from labkit.analysis.compare import compare, format_tables, rows_json, stderr_progress

    rows = compare(
        tps=[float(t) for t in args.tps.split(",")],
        scenario=args.scenario,
        profile=args.profile,
        repeat=max(1, args.repeat),
        designs=[d.strip() for d in args.designs.split(",")],
        fresh_connection=args.fresh_connection,
        progress=stderr_progress,
    )
    print(json.dumps(rows_json(rows), indent=2) if args.json else format_tables(rows))


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
