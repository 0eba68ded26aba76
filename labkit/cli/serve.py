"""``labkit serve``: bind the port, then run the server (one process, or ``--workers`` of them)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import os
import shutil
import signal
import socket
import threading
import typing
from types import FrameType
from typing import TYPE_CHECKING, Any

from labkit.cli.checks import (
    CommandError,
    check_db,
    check_keys,
    check_models,
    check_profile,
    design_spec,
    port_number,
    positive_count,
    positive_number,
)
from labkit.designs import DESIGNS
from labkit.limits import ServerLimits
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE
from labkit.server.edge.auth import keys_from_env

if TYPE_CHECKING:
    from labkit.server.config import ServerConfig

DEFAULT_HOST = "127.0.0.1"  # this machine only
DEFAULT_PORT = 8765
READY_LINE = "labkit: serving on http://{host}:{port}/v1"
PARENT_GONE_GRACE_S = 5.0  # how long open connections may hold up a shutdown nobody will cut short
# One process: how long open responses may hold up SIGTERM or Ctrl-C (LabkitServer kills at 10 s).
SHUTDOWN_GRACE_S = 5.0
# SIGTERM's whole bound: that grace, then at most 2 s to write the billing queue (billing.DRAIN_S,
# even with the ledger's disk full), then the database files close (a statement still waiting
# for a lock ends within its timeout, counted from when it was asked: before the drain began).
SHUTDOWN_BOUND_S = 8.0


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port; a failure is one line saying what to change."""
    from labkit.server.edge.wire_limits import ListeningSocket  # accepts once a retry when out of descriptors

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # proto=IPPROTO_TCP matters: asyncio only turns Nagle's algorithm off (TCP_NODELAY) for
        # sockets that say they are TCP, and Nagle plus delayed ACKs holds small frames for 40 ms.
        sock = ListeningSocket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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


def add_connection_cache_flag(parser: argparse.ArgumentParser) -> None:
    """``--connection-cache FILE.py:ClassName``: a learner's connection cache, in place of labkit's
    (``labkit.server.ws.learner_cache``; a server of the learner's own, on this machine only)."""
    parser.add_argument(
        "--connection-cache",
        metavar="FILE.py:CLASS",
        help="every WebSocket connection's cache is an instance of this class (serve, keep, failed, "
        "as labkit.connection_cache's), each call guarded: a learner's exercise; "
        "loopback --host only",
    )


def load_connection_cache(spec: str | None, host: str) -> type | None:
    """The class ``--connection-cache`` names, loaded once; one line (exit 2) if it cannot be.
    A learner's code runs only on a server of their own: never on a room's (a non-loopback host)."""
    if spec is None:
        return None
    from labkit.cli.checks import _is_loopback
    from labkit.server.ws.learner_cache import LearnerCacheError, load_class

    if not _is_loopback(host):
        raise CommandError(
            f"--connection-cache runs a learner's code: only on a server of the learner's own, on a "
            f"loopback --host (127.0.0.1), not on {host}"
        )
    try:
        found = load_class(spec)
    except LearnerCacheError as err:
        raise CommandError(str(err)) from None
    print(f"labkit: every WebSocket connection's cache is {found.__name__}, from {spec.rpartition(':')[0]}")
    return found


def limit_flag(name: str) -> str:
    """The ``labkit serve`` flag of a ``ServerLimits`` field: a trailing ``_s`` (seconds) left off.

    >>> limit_flag("max_body_bytes"), limit_flag("head_timeout_s")
    ('--max-body-bytes', '--head-timeout')
    """
    return "--" + name.removesuffix("_s").replace("_", "-")


def add_limit_flags(parser: argparse.ArgumentParser, limits: type[ServerLimits] = ServerLimits) -> None:
    """A flag for each field of ``limits``, its default and help the field's; parsed into
    ``args.<field name>`` (``limits_of``). A float is seconds (a positive number), an int or
    ``int | None`` a count (a whole number, 1 or more)."""
    group = parser.add_argument_group("limits for a room of clients (docs/protocol.md, \"Limits\")")
    hints = typing.get_type_hints(limits)
    for spec in dataclasses.fields(limits):
        kind = hints[spec.name]
        if kind is float:
            kind_of, metavar = positive_number, "SECONDS"
        elif kind in (int, int | None):
            kind_of, metavar = positive_count, "N"
        else:
            raise TypeError(f"ServerLimits.{spec.name}: a limit is an int, an int | None or a float")
        group.add_argument(
            limit_flag(spec.name),
            type=kind_of,
            default=spec.default,
            metavar=metavar,
            dest=spec.name,
            help=spec.metadata["help"],
        )


def limits_of(args: argparse.Namespace, limits: type[ServerLimits] = ServerLimits) -> ServerLimits:
    """The limits ``add_limit_flags``' flags were given."""
    return limits(**{spec.name: getattr(args, spec.name) for spec in dataclasses.fields(limits)})


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration from ``labkit serve``'s arguments and the environment."""
    from labkit.server.config import ServerConfig
    from labkit.server.stores.trace_stream import instructor_keys_from_env

    config = ServerConfig(
        api_keys=(args.api_key or []) + keys_from_env(),
        models=args.models,
        profile=args.profile,
        design=args.design,
        data_dir=default_data_dir(),
        instructor_keys=(args.instructor_key or []) + instructor_keys_from_env(),
        limits=limits_of(args),
    )
    if args.db:
        config.db = args.db
    return config


def serve(args: argparse.Namespace) -> None:
    data_dir = default_data_dir()
    check_profile(args.profile, data_dir)
    check_models(args.models)
    # Imported only now: the server's modules take most of a second to load, which every
    # mistake caught above (and every --help) would otherwise wait for.
    import uvicorn

    from labkit.server.app import create_app
    from labkit.server.edge.descriptors import raise_open_files_limit
    from labkit.server.edge.network import MAX_HEADER_BYTES, TrackedHTTP
    from labkit.server.edge.shutdown import Server
    from labkit.server.ws.protocol import BoundedWebSocket

    config = server_config(args)
    check_db(config.db)
    if args.workers > 1 and not hasattr(os, "fork"):
        # Workers are forked (they share the bound socket): without fork, one process serves all.
        print(f"labkit: --workers {args.workers} needs fork (Linux, macOS); serving with one process")
        args.workers = 1
    if args.workers > 1 and config.db == ":memory:":
        raise CommandError(
            "--workers shares stored responses and billing through the database file; "
            "with --db :memory: each worker would have its own, so pass a file with --db"
        )
    if args.workers > 1:  # one room's traces, shared by its workers through the database file
        config.trace_room = os.urandom(8).hex()
    check_keys(
        args.host, config.api_keys, allow_no_keys=args.allow_no_keys, instructor_keys=config.instructor_keys
    )
    config.connection_cache = load_connection_cache(getattr(args, "connection_cache", None), args.host)
    if args.remove_with_parent and not args.exit_with_parent:
        raise CommandError("--remove-with-parent needs --exit-with-parent")
    raise_open_files_limit()  # room for a room's connections (workers inherit it): most start at 1,024
    # Bind first, so the port (even 0, "any free port") is known before announcing readiness.
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    app = create_app(config)
    server = Server(
        uvicorn.Config(
            app,
            log_level=args.log_level,
            lifespan="on",
            ws_ping_interval=None,
            ws=BoundedWebSocket,  # pongs nobody reads and fragments count toward the connection's bound
            ws_max_size=config.limits.max_frame_bytes,  # a larger frame is refused: close code 1009
            http=TrackedHTTP.configured(
                config.limits.head_timeout_s,
                descriptor_reserve=config.limits.descriptor_reserve,
                head_timeout_when_short_s=config.limits.head_timeout_when_short_s,
            ),
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,  # larger headers: a 431 in the API's shape
        ),
        app.state.shutdown,  # trace streams end as the shutdown begins, not when their readers leave
    )

    parent_gone = threading.Event()
    try:
        if args.workers > 1:
            from labkit.server.edge.workers import WorkersError, serve_workers

            ready_line = READY_LINE.format(host=args.host, port=port)
            lifeline = 0 if args.exit_with_parent else None  # standard input's descriptor
            try:
                if serve_workers(server, sock, args.workers, config.db, ready_line, lifeline=lifeline):
                    parent_gone.set()
            except WorkersError as e:
                raise CommandError(str(e), status=1) from None
            return

        # No supervisor will kill this process after a grace period: bound the wait for clients here.
        server.config.timeout_graceful_shutdown = SHUTDOWN_GRACE_S
        exit_zero_after_sigterm()
        if args.exit_with_parent:
            watch_parent(0, server, parent_gone)

        async def run() -> None:
            task = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            if server.started:
                print(READY_LINE.format(host=args.host, port=port), flush=True)
            await task

        asyncio.run(run())
    finally:
        # Only once the parent is gone: while it lives the folder is its own (it restarts the
        # server on the same database, and removes the folder itself when it closes).
        if parent_gone.is_set() and args.remove_with_parent:
            shutil.rmtree(args.remove_with_parent, ignore_errors=True)


def exit_zero_after_sigterm() -> None:
    """Exit with status 0 once uvicorn has stopped gracefully on SIGTERM.

    uvicorn raises the signal again, after its shutdown, for the handler that was there before
    it: with the default one the process would die by the signal, as if it had been killed.
    """
    if threading.current_thread() is threading.main_thread():  # signals are the main thread's
        signal.signal(signal.SIGTERM, _exit_quietly)


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def watch_parent(fd: int, server: Any, gone: threading.Event) -> threading.Thread:
    """``--exit-with-parent`` for one process: stop ``server`` (a uvicorn.Server) once the pipe on
    ``fd`` ends, as SIGTERM would, and set ``gone``.

        watch_parent(0, server, parent_gone)   # 0: standard input, the parent's pipe

    Only the parent holds the pipe's other end and never writes to it, so its end means the parent
    has exited, however it ended (even SIGKILL); this works alike on Linux, macOS and Windows. A
    thread rather than the event loop, because Windows' loops cannot watch a pipe.
    """

    def run() -> None:
        while True:
            try:
                if not os.read(fd, 65536):  # the end of the pipe (anything written is ignored)
                    break
            except OSError:  # Windows reports a pipe whose writer has gone as an error
                break
        gone.set()
        if server.config.timeout_graceful_shutdown is None:
            # Nobody will kill this server after a grace period: bound the wait for clients here.
            server.config.timeout_graceful_shutdown = PARENT_GONE_GRACE_S
        server.should_exit = True  # uvicorn's main loop looks at it every 0.1 s, as on SIGTERM

    thread = threading.Thread(target=run, name="labkit-exit-with-parent", daemon=True)
    thread.start()
    return thread


LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]  # uvicorn's names


def add_serve_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """``labkit serve``'s arguments, on the ``labkit`` command's subparsers."""
    serve_help = "run the Responses API server (HTTP, SSE and WebSocket mode)"
    p = sub.add_parser("serve", help=serve_help, description=serve_help, formatter_class=formatter)
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
