"""The room guide's room, run: the command of "Running labkit for a room", as docs/instructors.md
writes it, serving the story notebooks under the learners' keys and the dashboard under the instructor's.

    python .ci/check_room.py [--limit SECONDS]

Run it with the Python of the environment the README's main command builds (.ci/check-main-env
does, in its fresh virtualenv: the learners' environment). The command is read from the fenced
block of that section; only the address changes (127.0.0.1, and port 0: the server picks a free
one and says which) and the database (a temporary file). It runs as a real process, found ready
on /healthz; then notebooks 01 to 04 run headless, each with a learner's key from the command in
``LABKIT_API_KEY`` (``LABKIT_URL`` and ``LABKIT_NAME`` beside it), and 07 with the instructor's
key. Each must say it joined the room, and its key must have responses in the room's billing
ledger. Then SIGTERM, and the server must exit with status 0, its workers with it. One line per
notebook with its time; any failure exits non-zero, and the server and its files are removed
whatever happens.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import closing
from pathlib import Path

import httpx
from run_notebooks import ROOT, run

from labkit.api.owners import owner_of_key
from labkit.client.launcher import READY
from labkit.client.room import KEY_ENV, NAME_ENV, URL_ENV

ROOM_GUIDE = ROOT / "docs" / "instructors.md"  # the README links it for a room
SECTION = "## Running labkit for a room"
LEARNER_NOTEBOOKS = [
    "01_naive_stateless_loop.ipynb",
    "02_single_request_optimizations.ipynb",
    "03_persistent_socket_cache.ipynb",
    "04_appended_rollout_prototype.ipynb",
]
INSTRUCTOR_NOTEBOOK = "07_instructor_dashboard.ipynb"
START_S = 60.0  # from the command to /healthz answering: the workers start in a few seconds
# SIGTERM's bound (docs/instructors.md, "Stopping"): at most 8 s whatever the disk does; this allows
# twice that.
STOP_S = 16.0
POSIX = os.name == "posix"


def say(line: str) -> None:
    print(f"[check-room] {line}", flush=True)


# ---------------------------------------------------------------- the room guide's command


def room_command(guide: str) -> list[str]:
    """The argument list of the room section's fenced command.

    >>> guide = "## Running labkit for a room\\n```bash\\nlabkit serve \\\\\\n  --api-key k\\n```\\n"
    >>> room_command(guide)
    ['labkit', 'serve', '--api-key', 'k']
    """
    if SECTION not in guide:
        raise SystemExit(f"check_room: docs/instructors.md has no section {SECTION!r}")
    section = guide.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    if block is None:
        raise SystemExit(f"check_room: the section {SECTION!r} has no ```bash block")
    argv = shlex.split(block[1].replace("\\\n", " "), comments=True)
    if argv[:2] != ["labkit", "serve"]:
        raise SystemExit(f"check_room: the room's command is not `labkit serve ...`: {argv}")
    return argv


def values_of(argv: list[str], option: str) -> list[str]:
    """Every value given to ``option``, in order (``--opt v`` and ``--opt=v``).

    >>> values_of(["--api-key", "a", "--api-key=b", "--db", "x"], "--api-key")
    ['a', 'b']
    """
    found = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == option]
    return found + [arg.split("=", 1)[1] for arg in argv if arg.startswith(option + "=")]


def with_value(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option`` set to ``value``: in place where it is given, appended otherwise.

    >>> with_value(["serve", "--host", "0.0.0.0"], "--host", "127.0.0.1")
    ['serve', '--host', '127.0.0.1']
    >>> with_value(["serve"], "--port", "0")
    ['serve', '--port', '0']
    """
    out, given, skip = [], False, False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == option and i + 1 < len(argv):
            out += [option, value]
            given = skip = True
        elif arg.startswith(option + "="):
            out.append(f"{option}={value}")
            given = True
        else:
            out.append(arg)
    return out if given else [*out, option, value]


def name_of(key: str) -> str:
    """A learner's name from the key the room guide hands them: ``sk-room-ada`` is Ada."""
    return key.rsplit("-", 1)[-1].title()


# ---------------------------------------------------------------- the room's server


class Room:
    """The room's ``labkit serve``, a real process in a process group of its own."""

    def __init__(self, argv: list[str], db: Path) -> None:
        labkit = shutil.which("labkit", path=str(Path(sys.executable).parent))
        if labkit is None:
            raise SystemExit(f"check_room: no labkit command beside {sys.executable}")
        self.argv = argv
        self.db = db
        self.log: deque[str] = deque(maxlen=200)
        self.url: str | None = None
        self._ready = threading.Event()
        # The guide's argv with its console script; PYTHONUNBUFFERED so its lines arrive as said.
        windows_group = {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
        group = {"start_new_session": True} if POSIX else windows_group
        self.process = subprocess.Popen(
            [labkit, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            **group,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip())
            match = READY.search(line)
            if match and not self._ready.is_set():
                self.url = match.group(1)
                self._ready.set()

    def wait_healthy(self) -> str:
        """The server's root URL, once ``/healthz`` answers 200."""
        deadline = time.monotonic() + START_S
        while not self._ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"labkit serve did not start:\n{self.output()}")
        assert self.url is not None
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.url}/healthz did not answer 200 within {START_S:g} s:\n{self.output()}")

    def stop(self) -> int:
        """SIGTERM, as an instructor's Ctrl-C or a service manager sends it; the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_S)

    def group_left(self) -> bool:
        """Whether any process of the server's group (its workers) is still there (POSIX)."""
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """Whatever is left of the server, gone (after a failure)."""
        if POSIX:
            if self.group_left():
                os.killpg(self.process.pid, signal.SIGKILL)
        elif self.process.poll() is None:
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(self.process.pid)], capture_output=True)
        self.process.wait(timeout=STOP_S)

    def output(self) -> str:
        return "\n".join(self.log)


def billed(db: Path, key: str) -> int:
    """How many responses the room's ledger holds for ``key``."""
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as ledger:
        query = "SELECT COUNT(*) FROM billing WHERE owner = ?"
        return ledger.execute(query, (owner_of_key(key),)).fetchone()[0]


# ---------------------------------------------------------------- the check


def run_in_room(room: Room, root: str, limit: float) -> list[str]:
    """The notebooks against the room, one line each; the failures, as sentences."""
    learners = values_of(room.argv, "--api-key")
    instructors = values_of(room.argv, "--instructor-key")
    if not learners or not instructors:
        return ["the room's command hands out no learner key or no instructor key"]
    plan = [(nb, learners[i % len(learners)]) for i, nb in enumerate(LEARNER_NOTEBOOKS)]
    plan.append((INSTRUCTOR_NOTEBOOK, instructors[0]))
    failures = []
    for notebook, key in plan:
        name = name_of(key)
        env = {**os.environ, URL_ENV: root, KEY_ENV: key, NAME_ENV: name}
        before = billed(room.db, key)
        result = run(ROOT / "notebooks" / notebook, limit, env)
        grew = billed(room.db, key) - before
        if result.ok and f"using the room's server at {root}" not in result.text:
            result.ok, result.why = False, "it did not say it joined the room"
        elif result.ok and grew <= 0:
            result.ok, result.why = False, f"the ledger has no new response under {key}"
        billed_now = f"{grew} response{'' if grew == 1 else 's'} billed"
        say(result.line(f"{notebook} as {name} ({key}), {billed_now}"))
        if not result.ok:
            failures.append(f"{notebook}: {result.why}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=90.0, help="seconds a notebook may take")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="labkit-room-") as tmp:
        argv = room_command(ROOM_GUIDE.read_text(encoding="utf-8"))
        argv = with_value(with_value(argv, "--host", "127.0.0.1"), "--port", "0")
        argv = with_value(argv, "--db", str(Path(tmp) / "room.sqlite3"))
        say("the room guide's room: " + shlex.join(argv))
        room = Room(argv, Path(tmp) / "room.sqlite3")
        try:
            root = room.wait_healthy()
            say(f"serving on {root}, /healthz 200 ({time.perf_counter() - started:.1f} s)")
            failures = run_in_room(room, root, args.limit)
            if POSIX:
                status = room.stop()
                left = room.group_left()
                say(f"SIGTERM: exit status {status}{', a worker left behind' if left else ''}")
                if status != 0 or left:
                    failures.append(f"exit status {status} after SIGTERM:\n{room.output()}")
            else:
                say("SIGTERM: not checked on Windows, which has no signal to send it (the server is ended)")
        except BaseException:
            print(room.output(), flush=True)
            raise
        finally:
            room.kill()
    for failure in failures:
        say(f"FAILED: {failure}")
    say(f"{'all green' if not failures else 'failed'} ({time.perf_counter() - started:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
