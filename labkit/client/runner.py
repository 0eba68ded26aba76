"""The test runner behind the ``run_tests`` tool: the sandbox's unittest suite, confined.

``run_suite`` runs code the model may have edited, so it starts it

- with an environment built from an allow-list (``TEST_ENV_KEEP``: PATH, locale, time zone):
  no API key or other secret of the client reaches it. HOME and TMPDIR are fresh, empty
  directories of the sandbox (next to the copy), the working directory is the copy;
- with a time limit (``TEST_TIMEOUT_S``, or ``run_suite(..., timeout_s=...)``), after which its
  whole process group is killed; the group is killed after a normal exit too, so nothing it
  left running in the background outlives the call;
- with resource limits (``labkit.client.confine``): CPU seconds, file size, address space,
  processes (not enforced for root), no core files;
- where the kernel has Landlock (Linux 5.13+, no privileges needed): it can create, change and
  delete files only inside the sandbox (and write to /dev/null); from Linux 6.7 it cannot open
  or accept TCP connections, and from 6.12 it cannot signal processes outside the run.

**Per OS.** All of the above holds on Linux with Landlock. macOS (and Linux without Landlock)
has the limits and the group kill but not the write restriction. Windows has neither limits nor
Landlock: the test run starts in a new process group, and at the time limit its process tree is
killed (``taskkill /T /F``); what it leaves running after a normal exit outlives the call. The
first tool call of a process where something is missing says what, once (``SandboxWarning``).

What the test run can still do: read any file the user running labkit can read, and print it
into its output, which goes to the model; use UDP and Unix sockets (and TCP without Landlock);
without Landlock, write wherever the user can (``/tmp``, the real home by its absolute path);
leave a process running if it starts one in a new session (``setsid``). This keeps a teaching
kit's agent honest; it is not a boundary against hostile code, which belongs in a container or
a virtual machine.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from labkit.client import confine
from labkit.client.sandbox import Sandbox, ToolError

TEST_TIMEOUT_S = 60.0
TEST_COMMAND = ("-m", "unittest", "discover", "-s", "tests", "-t", ".")
# The only variables the test run inherits: nothing secret, enough for Python and a locale.
TEST_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# Limits of the test run; generous for a unit-test suite, low enough to stop a runaway one.
TEST_LIMITS = {
    "RLIMIT_FSIZE": 64 * 2**20,  # bytes, any one file it writes (its output included)
    "RLIMIT_AS": 2 * 2**30,  # bytes of address space per process
    "RLIMIT_CORE": 0,  # no core files in the sandbox
}
TEST_EXTRA_PROCESSES = 64  # processes (threads count) it may start beyond the user's current ones
MAX_TEST_OUTPUT = 64_000  # characters of test output shown, the end kept (the summary is there)
CONFINE = Path(__file__).with_name("confine.py")
# What the test run can be confined with here (tests set them to check another OS's path).
POSIX = os.name == "posix"  # resource limits (confine.py) and a process group killed whole
WINDOWS = os.name == "nt"  # a new process group, its tree killed by taskkill
PLATFORM = sys.platform
# Windows' Python needs these to start (SYSTEMROOT: sockets, random numbers); none is secret.
TEST_ENV_KEEP_WINDOWS = ("SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT")


class SandboxWarning(UserWarning):
    """A protection of the tool sandbox that this platform does not have (said once a process)."""


# ---------------------------------------------------------------- what this platform lacks

_OS_NAMES = {"win32": "Windows", "cygwin": "Windows", "darwin": "macOS"}


def sandbox_gaps(platform: str, *, posix: bool, landlock_abi: int) -> str | None:
    """What the tool sandbox does not protect on ``platform`` (a ``sys.platform`` value), in one
    line; None where it has every protection the module's docstring lists.

    >>> print(sandbox_gaps("win32", posix=False, landlock_abi=0))  # doctest: +ELLIPSIS
    labkit: tool sandbox on Windows: no resource limits, no Landlock; tools are confined ...
    >>> sandbox_gaps("linux", posix=True, landlock_abi=4) is None
    True
    """
    linux = platform.startswith("linux")
    name = "Linux" if linux else _OS_NAMES.get(platform, platform)
    if not posix:
        return (
            f"labkit: tool sandbox on {name}: no resource limits, no Landlock; tools are confined to "
            "their folder by path checks only, and a test run's process tree is killed at its time limit"
        )
    if landlock_abi < 1:
        why = " (a kernel before 5.13, or the calls are filtered)" if linux else ""
        return (
            f"labkit: tool sandbox on {name}: no Landlock{why}; a test run can write wherever your user "
            "can (resource limits and the process-group kill still apply)"
        )
    return None


_gaps_lock = threading.Lock()
_gaps_told = False


def tell_sandbox_gaps() -> None:
    """Warn of what this platform does not protect, at the first tool call of the process only."""
    global _gaps_told
    with _gaps_lock:  # the agent client runs rollouts on threads
        if _gaps_told:
            return
        _gaps_told = True
    abi = confine.landlock_abi() if POSIX else 0
    gaps = sandbox_gaps(PLATFORM, posix=POSIX, landlock_abi=abi)
    if gaps:
        warnings.warn(gaps, SandboxWarning, stacklevel=3)


# ---------------------------------------------------------------- the run


def run_suite(sandbox: Sandbox, *, timeout_s: float | None = None) -> str:
    """Run the sandbox's unittest suite, confined; its output and an ``exit status`` line.

    ``timeout_s``: the time limit (default: the sandbox's ``test_timeout_s``, else
    ``TEST_TIMEOUT_S``); past it, ``ToolError`` with the output so far. Paths in the output
    are shown relative to the repository, so the text does not depend on where the sandbox lives.
    """
    tell_sandbox_gaps()
    limit = next(t for t in (timeout_s, sandbox.test_timeout_s, TEST_TIMEOUT_S) if t is not None)
    env = confined_environment(home=sandbox.fresh_dir("home"), tmp=sandbox.fresh_dir("tmp"))
    command = [sys.executable, *TEST_COMMAND]
    if POSIX:
        config = {
            "limits": {"RLIMIT_CPU": math.ceil(limit) + 1, **TEST_LIMITS},  # a backstop to the clock
            "extra_processes": TEST_EXTRA_PROCESSES,
            "writable": [str(sandbox.root)],
            "writable_files": [os.devnull],
        }
        # -I -S: the confining interpreter reads no environment and no site-packages.
        command = [sys.executable, "-I", "-S", str(CONFINE), json.dumps(config), *TEST_COMMAND]
    # Output to an unlinked file, not a pipe: a background process holding a pipe open would
    # keep the call waiting; RLIMIT_FSIZE bounds the file.
    with tempfile.TemporaryFile(dir=sandbox.root) as out:
        process = subprocess.Popen(
            command,
            cwd=sandbox.path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            **_new_process_group(),  # killed whole below
        )
        try:
            finished = _exited(process, limit)
        finally:
            _kill_group(process)
            process.wait()
        out.seek(0)
        output = _relative_output(out.read(), sandbox)
    if not finished:
        raise ToolError(f"tests timed out after {limit:g} s\n{output}".rstrip())
    code = process.returncode
    verdict = "passed" if code == 0 else "failed"
    if code < 0:  # a signal: a resource limit (SIGXCPU, SIGKILL at the address-space limit) or its own
        try:
            verdict += f", killed by {signal.Signals(-code).name}"
        except ValueError:  # a real-time signal has no name
            verdict += f", killed by signal {-code}"
    return f"{output}\n\nexit status: {code} ({verdict})".lstrip()


def confined_environment(*, home: Path, tmp: Path) -> dict[str, str]:
    """The test run's variables: the allow-list's, a private HOME and TMPDIR, Python's settings."""
    env = {key: os.environ[key] for key in TEST_ENV_KEEP if key in os.environ}
    if WINDOWS:
        env.update({key: os.environ[key] for key in TEST_ENV_KEEP_WINDOWS if key in os.environ})
        env["USERPROFILE"] = str(home)  # where Path.home() looks on Windows
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        TMP=str(tmp),
        TEMP=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",  # its prints and tracebacks in the order they happened
    )
    return env


def _relative_output(raw: bytes | str, sandbox: Sandbox) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.replace(str(sandbox.path) + os.sep, "").rstrip()
    if len(text) > MAX_TEST_OUTPUT:
        cut = len(text) - MAX_TEST_OUTPUT
        text = f"... ({cut} earlier characters of output not shown)\n{text[cut:]}"
    return text


# ---------------------------------------------------------------- waiting and killing


def _exited(process: subprocess.Popen[bytes], limit_s: float) -> bool:
    """Wait until the process exits or ``limit_s`` passes; True if it exited.

    On Linux a pidfd says the moment it exits, and leaves it unreaped: while it is a zombie its
    pid, its process group's id, cannot go to another process, so the group kill that follows
    cannot miss. Elsewhere ``Popen.wait`` polls, and reaps.
    """
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(process.pid)
        except OSError:  # a kernel before 5.3
            pidfd = None
        if pidfd is not None:
            try:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                return bool(poller.poll(math.ceil(limit_s * 1000)))
            finally:
                os.close(pidfd)
    try:
        process.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def _new_process_group() -> dict[str, Any]:
    """``Popen`` arguments that start the test run in a process group of its own."""
    if WINDOWS:
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}  # type: ignore[attr-defined]
    return {"start_new_session": POSIX}


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the test run and everything it started that stayed in its process group."""
    if WINDOWS:
        _kill_tree(process)
    elif POSIX:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """Windows: kill the process and its descendants (``taskkill /T``), else the process alone."""
    if process.poll() is not None:  # exited: its pid may already be another process's
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["taskkill", "/T", "/F", "/PID", str(process.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    if process.poll() is None:  # no taskkill (or it failed): at least the run itself
        with contextlib.suppress(OSError):
            process.kill()
