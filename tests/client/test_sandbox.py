"""The tool sandbox on an OS that lacks some of its protections, and imports without POSIX modules.

Only one OS runs the tests at a time, so the others are simulated: ``labkit.client.runner``
decides from ``POSIX``, ``WINDOWS`` and ``PLATFORM`` (and the kernel's Landlock ABI) what it
can use, and the tests set those. The test run must still run, and the one warning must say
what is not protected.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labkit.client import confine, runner
from labkit.client.runner import SandboxWarning, sandbox_gaps
from labkit.client.sandbox import Sandbox
from labkit.client.tools import run_tests, run_tool

pytestmark = pytest.mark.slow  # the command line and sandbox in subprocesses

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def box() -> Iterator[Sandbox]:
    with Sandbox() as sandbox:
        yield sandbox


@pytest.fixture
def first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if no tool had run yet in this process."""
    monkeypatch.setattr(runner, "_gaps_told", False)


def as_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows' choices, minus the two calls that exist on Windows only (creationflags, taskkill)."""
    monkeypatch.setattr(runner, "POSIX", False)
    monkeypatch.setattr(runner, "PLATFORM", "win32")


# ---------------------------------------------------------------- the one warning


def test_windows_runs_the_tests_unconfined_and_says_so(
    box: Sandbox, first_call: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_windows(monkeypatch)
    started: list[list[str]] = []
    popen = subprocess.Popen

    def spy(command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        started.append(list(command))
        return popen(command, **options)

    monkeypatch.setattr(subprocess, "Popen", spy)
    with pytest.warns(SandboxWarning) as told:
        output = run_tests(box)
    assert output.splitlines()[-1] == "exit status: 1 (failed)"  # the sample repository's failing test
    assert [str(w.message) for w in told] == [
        "labkit: tool sandbox on Windows: no resource limits, no Landlock; tools are confined to their "
        "folder by path checks only, and a test run's process tree is killed at its time limit"
    ]
    assert str(runner.CONFINE) not in started[0]  # confine.py needs resource, which Windows lacks


def test_the_warning_comes_once_a_process(
    box: Sandbox, first_call: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_windows(monkeypatch)
    with pytest.warns(SandboxWarning):
        run_tool(box, "read_file", '{"path": "README.md"}')  # the first tool call of any kind
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_tests(box).endswith("(failed)")
        run_tool(box, "list_files", '{"path": "."}')


def test_the_time_limit_still_stops_a_run_without_process_groups(
    box: Sandbox, first_call: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_windows(monkeypatch)
    (box.path / "tests" / "test_slow.py").write_text(
        "import time\nimport unittest\n\n\nclass Slow(unittest.TestCase):\n"
        "    def test_sleeps(self):\n        time.sleep(30)\n"
    )
    with pytest.warns(SandboxWarning):
        assert run_tests(box, timeout_s=1.0).startswith("error: tests timed out after 1 s")


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (
            "darwin",
            "labkit: tool sandbox on macOS: no Landlock; a test run can write wherever your user can "
            "(resource limits and the process-group kill still apply)",
        ),
        (
            "linux",
            "labkit: tool sandbox on Linux: no Landlock (a kernel before 5.13, or the calls are filtered); "
            "a test run can write wherever your user can (resource limits and the process-group kill "
            "still apply)",
        ),
    ],
)
def test_without_landlock_the_limits_still_apply_and_the_warning_says_what_is_missing(
    box: Sandbox, first_call: None, monkeypatch: pytest.MonkeyPatch, platform: str, expected: str
) -> None:
    monkeypatch.setattr(runner, "PLATFORM", platform)
    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    with pytest.warns(SandboxWarning) as told:
        assert run_tests(box).endswith("(failed)")
    assert [str(w.message) for w in told] == [expected]


@pytest.mark.skipif(not runner.POSIX or confine.landlock_abi() < 1, reason="needs Linux with Landlock")
def test_with_every_protection_nothing_is_said(box: Sandbox, first_call: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_tests(box).endswith("(failed)")


def test_the_gaps_of_each_platform() -> None:
    assert sandbox_gaps("linux", posix=True, landlock_abi=1) is None
    windows = sandbox_gaps("win32", posix=False, landlock_abi=0) or ""
    assert "on Windows: no resource limits, no Landlock" in windows
    assert "on freebsd14: no Landlock;" in (sandbox_gaps("freebsd14", posix=True, landlock_abi=0) or "")


# ---------------------------------------------------------------- Windows' own calls, by mechanism


class FakeProcess:
    pid = 4242

    def __init__(self, alive_after: int) -> None:
        self.polls, self.alive_after, self.killed = 0, alive_after, False

    def poll(self) -> int | None:
        self.polls += 1
        return None if self.polls <= self.alive_after else 1

    def kill(self) -> None:
        self.killed = True


def test_windows_kills_the_process_tree_with_taskkill(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(runner, "WINDOWS", True)
    monkeypatch.setattr(subprocess, "run", lambda command, **options: ran.append(command))
    process = FakeProcess(alive_after=1)  # alive until taskkill
    runner._kill_group(process)  # type: ignore[arg-type]
    assert ran == [["taskkill", "/T", "/F", "/PID", "4242"]] and not process.killed


def test_without_taskkill_windows_kills_the_run_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(command: list[str], **options: Any) -> None:
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(runner, "WINDOWS", True)
    monkeypatch.setattr(subprocess, "run", missing)
    process = FakeProcess(alive_after=5)
    runner._kill_group(process)  # type: ignore[arg-type]
    assert process.killed


def test_a_run_that_exited_is_not_killed_by_its_old_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(runner, "WINDOWS", True)
    monkeypatch.setattr(subprocess, "run", lambda command, **options: ran.append(command))
    process = FakeProcess(alive_after=0)
    runner._kill_group(process)  # type: ignore[arg-type]
    assert ran == [] and not process.killed


def test_windows_starts_the_run_in_a_new_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200, raising=False)
    monkeypatch.setattr(runner, "WINDOWS", True)
    assert runner._new_process_group() == {"creationflags": 0x200}
    monkeypatch.setattr(runner, "WINDOWS", False)
    assert runner._new_process_group() == {"start_new_session": runner.POSIX}


def test_windows_keeps_what_python_needs_to_start_and_nothing_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "WINDOWS", True)
    monkeypatch.setenv("SYSTEMROOT", r"C:\Windows")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    env = runner.confined_environment(home=tmp_path / "home", tmp=tmp_path / "tmp")
    assert env["SYSTEMROOT"] == r"C:\Windows" and env["USERPROFILE"] == str(tmp_path / "home")
    assert "OPENAI_API_KEY" not in env


def test_a_limit_the_system_refuses_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    set_limits: list[int] = []

    def setrlimit(which: int, values: tuple[int, int]) -> None:  # records; this process keeps its limits
        if which == resource.RLIMIT_AS:
            raise ValueError("not allowed to lower the maximum limit")  # as macOS may answer
        set_limits.append(which)

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    confine.lower_limits({"RLIMIT_AS": 2**31, "RLIMIT_CORE": 0})
    assert set_limits == [resource.RLIMIT_CORE]


# ---------------------------------------------------------------- importing without POSIX modules

POSIX_ONLY = ("resource", "fcntl", "termios", "pwd", "grp", "tty", "pty")

IMPORT_ALL = """
import importlib, json, pkgutil, sys
for name in {blocked}:
    sys.modules[name] = None  # what Windows has: importing it raises ImportError
import labkit
failed = {{}}
for module in pkgutil.walk_packages(labkit.__path__, "labkit."):
    if module.name == "labkit.__main__":
        continue  # runs the command line
    try:
        importlib.import_module(module.name)
    except Exception as exc:
        failed[module.name] = repr(exc)
print(json.dumps(failed))
"""


def test_every_module_imports_without_posix_only_modules() -> None:
    # A subprocess: blocking them here would break this process's own later imports.
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL.format(blocked=repr(POSIX_ONLY))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {}


NO_FORK_SERVE = """
import os, sys
del os.fork  # what Windows has
from labkit.cli import main
main(sys.argv[1:])
"""


def test_workers_without_fork_serve_with_one_process_and_say_so(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", NO_FORK_SERVE, "serve", "--port", "0", "--workers", "2"]
    cmd += ["--db", str(tmp_path / "room.sqlite3"), "--profile", "local"]
    server = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        first, second = server.stdout.readline(), server.stdout.readline()
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert first.strip() == "labkit: --workers 2 needs fork (Linux, macOS); serving with one process"
    assert second.startswith("labkit: serving on http://127.0.0.1:")
