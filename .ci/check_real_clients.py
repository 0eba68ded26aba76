"""Real Responses API clients, unmodified, against labkit: the Vercel AI SDK and the Codex CLI.

    .venv/bin/python .ci/check_real_clients.py [--install auto|always|never] [--check NAME ...]
                                               [--keep DIR]

The clients are the npm packages pinned in tools/real_clients/package-lock.json, installed
there with ``npm ci --ignore-scripts`` (the npm registry is the only network this uses, and only
to install; the Codex CLI's native binary ships inside its package). One ``labkit serve`` on
127.0.0.1 with its defaults serves every check; each check sends its own API key, so the
server's traces stream (``GET /v1/labkit/traces/stream``) under that key shows exactly the
responses that client made, and ``GET /v1/labkit/traces?response_id=…`` answers for each.

- ``vercel-generate``, ``vercel-stream``: ``ai`` + ``@ai-sdk/openai`` (its Responses model)
  running a tool-using ``generateText`` (JSON) or ``streamText`` (SSE) over the sample
  repository, then a follow-up that continues the answer by ``previousResponseId``
  (tools/real_clients/vercel.mjs).
- ``vercel-compaction``: the same with the provider's ``contextManagement`` (server-side
  compaction, ``context_management`` on the wire): the server compacts mid-task, the SDK sends
  the compaction item back with the rest of its history, the input must shrink and the task
  end in an answer.
- ``vercel-websocket``: reported, not run: the provider has no WebSocket mode of its own (see
  ``VERCEL_WEBSOCKET``).
- ``codex-http``, ``codex-websocket``: ``codex exec`` on a temporary git copy of
  data/sample_repo, with a ``CODEX_HOME`` of its own whose ``config.toml`` points a model
  provider at labkit (``wire_api = "responses"``; ``supports_websockets = true`` for WebSocket
  mode, where Codex opens with a ``generate: false`` warm-up).
- ``codex-resume``: ``codex exec resume --last`` on the WebSocket session just run: a new
  connection, a new warm-up, the whole history replayed after it.

Each check prints PASS or FAIL and one line of evidence. Every client runs under a time limit,
with its proxy variables pointed at a local trap that refuses (and records) any connection
that is not to labkit on loopback. Exit status 0 when every check that ran passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ROOT / "tools" / "real_clients"
SAMPLE_REPO = ROOT / "data" / "sample_repo"
MODEL = "labkit-spark"
INSTALL_TIMEOUT_S = 900  # npm ci: mostly the Codex CLI's native binary (about 150 MB to fetch)
CLIENT_TIMEOUT_S = 180  # one client run; a run here takes a few seconds
SETTLE_S = 0.5  # the traces stream is quiet this long after a client exits: it has said everything
SETTLE_LIMIT_S = 10.0
# vercel-compaction's contextManagement threshold (tokens): past it once the model has read a
# source file or two, so a compaction happens mid-task; the task fits in the SDK's 12 steps.
COMPACT_THRESHOLD = 500
CODEX_TASK = "The test suite is failing. Find out why."
CODEX_FOLLOW_UP = "Now explain the fix."
# Codex's own notices, not answers from the server: labkit's models are not in Codex's
# catalogue of model metadata, so it says it uses defaults.
CODEX_LOCAL_NOTICES = ("Model metadata for",)
VERCEL_WEBSOCKET = (
    "@ai-sdk/openai {version} has no WebSocket mode for its Responses model: its docs "
    "(node_modules/@ai-sdk/openai/docs/03-openai.mdx, 'WebSocket Transport') route it through a "
    "separate package, ai-sdk-openai-websocket-fetch, which this check does not install"
)


# ---------------------------------------------------------------- results


@dataclass
class Result:
    name: str
    passed: bool | None  # None: not run (skipped), with the reason as evidence
    evidence: str
    seconds: float = 0.0

    def line(self) -> str:
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]
        timing = f" ({self.seconds:.1f} s)" if self.passed is not None else ""
        return f"{word}  {self.name}{timing}: {self.evidence}"


class CheckFailed(Exception):
    """A check's failure, with the one line that says why."""


# ---------------------------------------------------------------- no network but loopback


class ProxyTrap:
    """A proxy address that refuses every connection and records what was asked of it.

    Clients get it in ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` with ``NO_PROXY`` naming
    loopback, so their requests to labkit go direct and anything else (an update check, a
    plugin sync) ends here instead of on the network.
    """

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.attempts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="proxy-trap", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def env(self) -> dict[str, str]:
        proxies = {name: self.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
        proxies |= {name.lower(): value for name, value in proxies.items()}
        return proxies | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    first = conn.recv(512).split(b"\r\n", 1)[0].decode("latin-1")
                    self.attempts.append(first or "(an empty request)")

    def __enter__(self) -> ProxyTrap:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


# ---------------------------------------------------------------- installing the clients


def installed(clients: Path) -> bool:
    """Whether node_modules holds every package of the lock at its locked version (those for
    other platforms, optional, aside)."""
    lock = json.loads((clients / "package-lock.json").read_text())
    for path, meta in lock["packages"].items():
        if not path:
            continue
        manifest = clients / path / "package.json"
        if not manifest.exists():
            if meta.get("optional"):
                continue
            return False
        if json.loads(manifest.read_text()).get("version") != meta.get("version"):
            return False
    return True


def npm_ci(clients: Path) -> float:
    """``npm ci`` in the clients' folder; returns its seconds. No install script runs."""
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("check_real_clients: npm not found; install Node.js (20 or later) with npm")
    start = time.monotonic()
    cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
    try:
        done = subprocess.run(cmd, cwd=clients, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"check_real_clients: npm ci took over {INSTALL_TIMEOUT_S} s; try again later"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"check_real_clients: npm ci failed in {clients}:\n{tail}")
    return time.monotonic() - start


def package_version(name: str) -> str:
    return json.loads((CLIENTS / "node_modules" / name / "package.json").read_text())["version"]


# ---------------------------------------------------------------- what the server saw


@dataclass
class Seen:
    """The traces of one client's responses, as the server reported them."""

    traces: list[dict[str, Any]] = field(default_factory=list)

    def decoded(self) -> list[dict[str, Any]]:
        """Responses that sampled (a ``generate: false`` warm-up has no decode stage)."""
        return [t for t in self.traces if "decode" in stages(t)]

    def warm_ups(self) -> list[dict[str, Any]]:
        return [t for t in self.traces if "decode" not in stages(t)]

    def designs(self) -> set[str]:
        return {t["design"] for t in self.traces}

    def new_connections(self) -> int:
        return sum(
            1
            for t in self.traces
            for s in t["spans"]
            if s["stage"] == "connect" and s["detail"].get("new_connection")
        )

    def upgrades(self) -> int:
        return sum(1 for t in self.traces for s in t["spans"] if s["stage"] == "upgrade")

    def validated(self) -> list[int]:
        """Items the server checked per response: what each request carried."""
        return [s["items"] for t in self.traces for s in t["spans"] if s["stage"] == "validation"]

    def from_connection_cache(self) -> int:
        return sum(
            1
            for t in self.traces
            for s in t["spans"]
            if s["stage"] == "hydration" and s["detail"].get("source") == "connection_cache"
        )


def stages(trace: dict[str, Any]) -> list[str]:
    return [s["stage"] for s in trace["spans"]]


@contextlib.contextmanager
def watched(base_url: str, key: str, keep: Path) -> Iterator[Seen]:
    """The traces stream under ``key`` while the block runs, until it has gone quiet after it;
    written to ``keep`` (JSON) for a look afterwards."""
    from labkit.client.trace_watch import TraceWatcher

    seen = Seen()
    with TraceWatcher(base_url, key) as watcher:
        yield seen
        deadline = time.monotonic() + SETTLE_LIMIT_S
        count = -1
        while len(watcher.traces) != count and time.monotonic() < deadline:
            count = len(watcher.traces)
            time.sleep(SETTLE_S)
        seen.traces = list(watcher.traces)
    keep.write_text(json.dumps(seen.traces, indent=1))


def confirm_traces(base_url: str, key: str, response_ids: list[str]) -> None:
    """``GET /v1/labkit/traces?response_id=…`` answers with spans for every id."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=10) as http:
        for rid in response_ids:
            reply = http.get("/labkit/traces", params={"response_id": rid})
            if reply.status_code != 200 or not reply.json().get("data"):
                raise CheckFailed(f"the server has no trace for {rid} (HTTP {reply.status_code})")


# ---------------------------------------------------------------- the Vercel AI SDK


def vercel(mode: str) -> Callable[[Context], str]:
    def check(ctx: Context) -> str:
        key = f"sk-check-vercel-{mode}"
        cmd = ["node", "vercel.mjs", "--base-url", ctx.base_url, "--api-key", key, "--repo", str(SAMPLE_REPO)]
        cmd += ["--mode", mode, "--compact-threshold", str(COMPACT_THRESHOLD)]
        with watched(ctx.base_url, key, ctx.work / f"vercel-{mode}.traces.json") as seen:
            done = ctx.run(f"vercel-{mode}", cmd, cwd=CLIENTS, env={})
        if done.returncode != 0:
            raise CheckFailed(f"node exited {done.returncode}: {last_lines(done.stderr)}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        steps = out["steps"]
        tokens = "/".join(f"{s['input_tokens']}{'*' if s['compacted'] else ''}" for s in steps)
        if out["finish_reason"] != "stop" or not out["text"]:
            raise CheckFailed(
                f"no answer after {len(steps)} steps (finish {out['finish_reason']!r}); "
                f"input tokens per step {tokens} (* compacted)"
            )
        # every step that called tools was answered by the next one, since the last one is text
        calls = [name for step in steps for name in step["tool_calls"]]
        round_trips = sum(1 for step in steps if step["tool_calls"])
        if round_trips < 2:
            raise CheckFailed(f"{round_trips} tool round trips (at least 2 expected)")
        ids = [*(step["response_id"] for step in steps), out["follow_up"]["response_id"]]
        confirm_traces(ctx.base_url, key, ids)
        by_id = {t["response_id"]: t for t in seen.traces}
        missing = [rid for rid in ids if rid not in by_id]
        if missing:
            raise CheckFailed(f"the traces stream never showed {missing}")
        if by_id[ids[-1]]["previous_response_id"] != ids[-2]:
            raise CheckFailed("the follow-up did not continue the last step's response")
        if seen.upgrades():
            raise CheckFailed("a WebSocket upgrade reached the server: not plain HTTP")
        compaction = ""
        if mode == "compaction":
            compaction = compaction_evidence(steps, tokens)
        transport = {"generate": "HTTP, JSON", "stream": "HTTP, SSE", "compaction": "HTTP, SSE"}[mode]
        return (
            f"{transport}, design {'/'.join(sorted(seen.designs()))}: {len(steps)} responses, "
            f"{round_trips} tool round trips ({', '.join(calls)}), {compaction}"
            f"{steps[-1]['cached_tokens']} cached tokens on the last, then a previousResponseId follow-up; "
            f"all {len(ids)} ids traced by the server ({ids[0][:13]}…)"
        )

    return check


def compaction_evidence(steps: list[dict[str, Any]], tokens: str) -> str:
    """``contextManagement``: the server compacted, and the next step read a shorter input."""
    compacted = [i for i, step in enumerate(steps) if step["compacted"]]
    if not compacted:
        raise CheckFailed(f"no step compacted (input tokens per step {tokens})")
    first = compacted[0]
    if first + 1 < len(steps) and steps[first + 1]["input_tokens"] >= steps[first]["input_tokens"]:
        raise CheckFailed(
            f"the input did not shrink after compacting: input tokens per step {tokens} (* compacted)"
        )
    return f"compacted {plural(len(compacted), 'time')} (input tokens per step {tokens}, * compacted), "


# ---------------------------------------------------------------- the Codex CLI


def codex_home(folder: Path, base_url: str, websockets: bool) -> Path:
    """A ``CODEX_HOME`` whose config points a model provider at labkit, with what Codex fetches
    from the network at start switched off."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        f"""model = "{MODEL}"
model_provider = "labkit"
check_for_update_on_startup = false

[model_providers.labkit]
name = "labkit"
base_url = "{base_url}"
env_key = "LABKIT_API_KEY"
wire_api = "responses"
supports_websockets = {str(websockets).lower()}
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 60000

[analytics]
enabled = false

# features that would reach for the network at start (plugin and app catalogues)
[features]
plugins = false
remote_plugin = false
apps = false
"""
    )
    return folder


def sample_git_repo(folder: Path) -> Path:
    """A git repository holding a copy of data/sample_repo, one commit."""
    shutil.copytree(SAMPLE_REPO, folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git = [
        "git",
        "-c",
        "user.name=labkit",
        "-c",
        "user.email=labkit@localhost",
        "-c",
        "init.defaultBranch=main",
    ]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "sample repository"]):
        subprocess.run([*git, *args], cwd=folder, check=True, capture_output=True, timeout=30)
    return folder


def codex_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def read_codex_run(done: subprocess.CompletedProcess[str]) -> int:
    """Codex's own account of the run: command executions and the final message, or a failure."""
    if done.returncode != 0:
        raise CheckFailed(f"codex exited {done.returncode}: {last_lines(done.stdout + done.stderr)}")
    events = codex_events(done.stdout)
    failed = [e for e in events if e["type"] in ("turn.failed", "error")]
    if failed:
        raise CheckFailed(f"codex reported {json.dumps(failed[0])[:300]}")
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    notices = [i["message"] for i in items if i["type"] == "error"]
    trouble = [m for m in notices if not m.startswith(CODEX_LOCAL_NOTICES)]
    if trouble:  # e.g. "Falling back from WebSockets to HTTPS transport. …"
        raise CheckFailed(f"codex reported: {trouble[0][:300]}")
    if not any(e["type"] == "turn.completed" for e in events):
        raise CheckFailed("codex never completed its turn")
    if not any(i["type"] == "agent_message" and i.get("text") for i in items):
        raise CheckFailed("codex ended without an answer")
    return sum(1 for i in items if i["type"] == "command_execution")


def codex(transport: str, resume: bool = False) -> Callable[[Context], str]:
    websockets = transport == "websocket"

    def check(ctx: Context) -> str:
        if transport not in ctx.codex_homes:
            home = codex_home(ctx.work / f"codex-home-{transport}", ctx.base_url, websockets)
            ctx.codex_homes[transport] = (home, sample_git_repo(ctx.work / f"repo-{transport}"))
        home, repo = ctx.codex_homes[transport]
        if resume and not (home / "sessions").exists():
            raise CheckFailed(f"no session to resume: codex-{transport} did not run")
        options = ["--json", "--sandbox", "read-only", "--cd", str(repo)]
        task = ["resume", "--last", CODEX_FOLLOW_UP] if resume else [CODEX_TASK]
        key = f"sk-check-codex-{transport}"
        env = {"CODEX_HOME": str(home), "LABKIT_API_KEY": key, "RUST_LOG": "warn"}
        name = f"codex-{'resume' if resume else transport}"
        with watched(ctx.base_url, key, ctx.work / f"{name}.traces.json") as seen:
            done = ctx.run(
                name,
                [str(codex_binary()), "exec", *options, *task],
                cwd=repo,
                env=env,
            )
        commands = read_codex_run(done)
        return codex_evidence(ctx, key, seen, websockets, commands, resume)

    return check


def codex_evidence(ctx: Context, key: str, seen: Seen, websockets: bool, commands: int, resume: bool) -> str:
    """What the server saw of one ``codex exec`` run, checked against the transport it was given."""
    if not seen.traces:
        raise CheckFailed("the server saw no response from codex")
    if any(t["status"] != "completed" for t in seen.traces):
        raise CheckFailed(f"statuses: {[t['status'] for t in seen.traces]}")
    decoded, warm_ups = seen.decoded(), seen.warm_ups()
    round_trips = len(decoded) - 1  # one task: every response but the answer ended on tool calls
    if round_trips < 2:
        raise CheckFailed(f"{round_trips} tool round trips (at least 2 expected)")
    confirm_traces(ctx.base_url, key, [t["response_id"] for t in seen.traces])
    items = "/".join(map(str, seen.validated()))
    ran = f"{round_trips} tool round trips ({plural(commands, 'shell command')} among them)"
    if not websockets:
        if seen.designs() != {"sprint"} or seen.upgrades():
            raise CheckFailed(f"designs {seen.designs()}, {seen.upgrades()} upgrades: not plain HTTP")
        return (
            f"HTTP + SSE, design sprint: {len(decoded)} responses, {ran}, store: false, so each request "
            f"carries the whole history (items per request {items}); "
            f"all traced ({decoded[0]['response_id'][:13]}…)"
        )
    if seen.designs() != {"websocket"} or seen.upgrades() != 1 or seen.new_connections() != 1:
        raise CheckFailed(
            f"designs {seen.designs()}, {seen.upgrades()} upgrades, "
            f"{seen.new_connections()} new connections: not one WebSocket (did Codex fall back to HTTP?)"
        )
    if not warm_ups:
        raise CheckFailed("no generate: false warm-up reached the server")
    if decoded[0]["previous_response_id"] != warm_ups[0]["response_id"]:
        raise CheckFailed("the first turn did not continue the warm-up's response")
    first = seen.validated()[seen.traces.index(decoded[0])]
    if resume and first <= ctx.fresh_task_items:
        raise CheckFailed(f"the resumed task sent {first} items: not the session's history")
    if not resume:
        ctx.fresh_task_items = first
    return (
        f"WebSocket mode, 1 connection, design websocket: a generate: false warm-up, then {len(decoded)} "
        f"responses chained by previous_response_id, {ran}, {seen.from_connection_cache()} continued from "
        f"the connection cache (items per request {items}"
        f"{': the history replayed once, after the warm-up' if resume else ''}); "
        f"all traced ({warm_ups[0]['response_id'][:13]}…)"
    )


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def codex_binary() -> Path:
    """The Codex CLI's launcher from its npm package (it runs the native binary shipped beside it)."""
    return CLIENTS / "node_modules" / ".bin" / "codex"


# ---------------------------------------------------------------- running


@dataclass
class Context:
    base_url: str
    work: Path
    trap: ProxyTrap
    codex_homes: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # transport: home, repo
    fresh_task_items: int = 0  # what codex-websocket's first turn sent, for codex-resume to exceed

    def run(
        self, name: str, cmd: list[str], cwd: Path, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        """One client run, bounded, with no standard input, its output kept in the work folder."""
        full_env = {**os.environ, **self.trap.env(), **env}
        try:
            done = subprocess.run(
                cmd,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=CLIENT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise CheckFailed(f"no result within {CLIENT_TIMEOUT_S} s") from exc
        (self.work / f"{name}.stdout").write_text(done.stdout)
        (self.work / f"{name}.stderr").write_text(done.stderr)
        return done


def last_lines(text: str, n: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-n:])[:500]


CHECKS: dict[str, Callable[[Context], str] | None] = {
    "vercel-generate": vercel("generate"),
    "vercel-stream": vercel("stream"),
    "vercel-compaction": vercel("compaction"),
    "vercel-websocket": None,  # reported, not run: VERCEL_WEBSOCKET
    "codex-http": codex("http"),
    "codex-websocket": codex("websocket"),
    "codex-resume": codex("websocket", resume=True),
}


def run_checks(names: list[str], work: Path) -> list[Result]:
    from labkit.client.launcher import LabkitServer

    results = []
    with ProxyTrap() as trap, LabkitServer() as server:
        ctx = Context(base_url=server.base_url, work=work, trap=trap)
        for name in names:
            check = CHECKS[name]
            if check is None:
                reason = VERCEL_WEBSOCKET.format(version=package_version("@ai-sdk/openai"))
                results.append(Result(name, None, reason))
                print(results[-1].line(), flush=True)
                continue
            before = len(trap.attempts)
            start = time.monotonic()
            try:
                evidence = check(ctx)
                passed = True
            except CheckFailed as failure:
                evidence, passed = str(failure), False
            blocked = trap.attempts[before:]
            if blocked:
                evidence += f"; refused {len(blocked)} connection(s) off loopback: {sorted(set(blocked))[:3]}"
            results.append(Result(name, passed, evidence, time.monotonic() - start))
            print(results[-1].line(), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--install",
        choices=["auto", "always", "never"],
        default="auto",
        help="npm ci in tools/real_clients: if what is installed differs from the lock (auto), always, never",
    )
    parser.add_argument("--check", action="append", choices=list(CHECKS), help="run only these (repeatable)")
    parser.add_argument("--keep", type=Path, help="keep the clients' output, configs and repositories in DIR")
    args = parser.parse_args()
    if shutil.which("node") is None:
        raise SystemExit("check_real_clients: node not found; install Node.js (20 or later)")
    if shutil.which("git") is None:
        raise SystemExit("check_real_clients: git not found; the Codex CLI works in a git repository")

    started = time.monotonic()
    if args.install == "always" or (args.install == "auto" and not installed(CLIENTS)):
        print(f"npm ci in {CLIENTS.relative_to(ROOT)} ...", flush=True)
        print(f"installed in {npm_ci(CLIENTS):.0f} s", flush=True)
    elif not installed(CLIENTS):
        raise SystemExit("check_real_clients: the clients are not installed; run without --install never")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    versions = ", ".join(
        f"{name} {package_version(name)}" for name in ("ai", "@ai-sdk/openai", "@openai/codex")
    )
    print(f"clients: {versions}; node {node}", flush=True)

    names = args.check or list(CHECKS)
    if "codex-resume" in names and "codex-websocket" not in names:
        names.insert(names.index("codex-resume"), "codex-websocket")  # the session it resumes
    if args.keep:
        if args.keep.exists() and any(args.keep.iterdir()):
            raise SystemExit(f"check_real_clients: --keep {args.keep} is not empty; give a new folder")
        args.keep.mkdir(parents=True, exist_ok=True)
        results = run_checks(names, args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="labkit-real-clients-") as work:
            results = run_checks(names, Path(work))
    ran = [r for r in results if r.passed is not None]
    passed = sum(1 for r in ran if r.passed)
    print(
        f"{passed} passed, {len(ran) - passed} failed, {len(results) - len(ran)} skipped "
        f"in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    sys.exit(0 if passed == len(ran) else 1)


if __name__ == "__main__":
    main()
