"""Real tools over a sandbox copy of a repository: the client's share of every agent-loop turn.

A ``Sandbox`` copies a repository (``data/sample_repo`` unless told otherwise)
into a fresh temporary directory, so the agent can read, search, patch and
test it without touching the original. Each tool is a plain function
``tool(sandbox, **arguments) -> str`` returning the text the model will see;
failures come back as text starting with ``"error: "`` and are never raised,
because a real agent shows its model the error and lets it try again.

``TOOL_SPECS`` are the tools as Responses API function definitions (strict
mode), and ``run_tool`` runs a function call as it arrives on the wire:

>>> with Sandbox() as box:
...     print(run_tool(box, "search", '{"pattern": "^def parse_terms", "path": "tally"}'))
tally/terms.py:69: def parse_terms(text: str) -> PaymentTerms:

**Staying in the sandbox.** Every path is resolved, symlinks followed, and must land inside
the copy, or the tool answers with an error. ``list_files`` and ``search`` do not enter
symlinked directories and skip a symlinked file unless it resolves to a file inside the copy.
A file is opened without following a symlink put in its place since the check, and only if it
is a regular file with no other hard link (one could be a file outside; a FIFO would block).

**Running the tests** runs code the model may have edited, so ``run_tests`` starts it

- with an environment built from an allow-list (``TEST_ENV_KEEP``: PATH, locale, time zone):
  no API key or other secret of the client reaches it. HOME and TMPDIR are fresh, empty
  directories of the sandbox (next to the copy), the working directory is the copy;
- with a time limit (``TEST_TIMEOUT_S``, or ``run_tests(..., timeout_s=...)``), after which its
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
import difflib
import functools
import json
import math
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from labkit.client import confine
from labkit.paths import default_data_dir

SAMPLE_REPO = default_data_dir() / "sample_repo"

ERROR_PREFIX = "error: "
SKIP_DIRS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv"})
SKIP_SUFFIXES = (".pyc", ".pyo")
MAX_LISTED = 1000  # files list_files shows before it says it stopped
MAX_LINES = 2000  # lines read_file shows before it says it stopped
MAX_MATCHES = 200  # matches search shows before it says it stopped
MAX_MATCH_CHARS = 240  # a matching line longer than this is cut
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

Tool = Callable[..., str]


class ToolError(Exception):
    """A tool could not do what it was asked; its message goes back to the model as text."""


class SandboxWarning(UserWarning):
    """A protection of the tool sandbox that this platform does not have (said once a process)."""


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


def _tell_sandbox_gaps() -> None:
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


def is_error(output: str) -> bool:
    """Whether a tool's output reports a failure.

    >>> is_error("error: no such file: x.py"), is_error("   1  import os")
    (True, False)
    """
    return output.startswith(ERROR_PREFIX)


# ---------------------------------------------------------------- the sandbox


class Sandbox:
    """A private copy of a repository in a temporary directory, removed on ``close``.

    >>> with Sandbox() as box:
    ...     (box.path / "README.md").is_file()
    True
    """

    def __init__(self, source: str | Path = SAMPLE_REPO, *, test_timeout_s: float | None = None) -> None:
        source = Path(source)
        if not source.is_dir():
            raise FileNotFoundError(f"no repository to copy at {source}")
        self.source = source
        self.test_timeout_s = test_timeout_s  # None: TEST_TIMEOUT_S
        self._tmp = tempfile.TemporaryDirectory(prefix="labkit-sandbox-")
        # Resolved, so containment checks compare like with like (e.g. macOS's /private/var).
        # ``root`` holds the copy and the test run's HOME and TMPDIR; the tools see the copy only.
        self.root = Path(self._tmp.name).resolve()
        self.path = self.root / (source.resolve().name or "repo")
        try:
            shutil.copytree(source, self.path, ignore=shutil.ignore_patterns(*SKIP_DIRS, "*.pyc", "*.pyo"))
        except BaseException:
            self._tmp.cleanup()
            raise

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Sandbox({str(self.source)!r} -> {str(self.path)!r})"

    @property
    def closed(self) -> bool:
        return not self.path.exists()

    def close(self) -> None:
        """Delete the copy (safe to call twice)."""
        self._tmp.cleanup()

    def resolve(self, path: str) -> Path:
        """The sandbox path for a repository-relative ``path``; ``ToolError`` if it leaves the sandbox.

        >>> with Sandbox() as box:
        ...     box.resolve("tally/../README.md") == box.path / "README.md"
        True
        """
        text = path.strip() or "."
        if "\0" in text:  # the OS would raise ValueError on it
            raise ToolError(f"path contains a NUL byte: {path!r}")
        if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
            raise ToolError(f"path must be relative to the repository root: {path}")
        try:
            target = (self.path / text).resolve()
        except ValueError:  # e.g. a lone surrogate from a JSON \\ud800 escape, not encodable
            raise ToolError(f"path is not a valid file name: {path!r}") from None
        if not target.is_relative_to(self.path):
            raise ToolError(f"path is outside the repository: {path}")
        return target

    def inside(self, entry: Path) -> Path | None:
        """Where ``entry`` (a path under the copy, maybe a symlink) really is, if inside the copy."""
        try:
            return self.resolve(self.relative(entry))
        except (ToolError, ValueError):
            return None

    def fresh_dir(self, name: str) -> Path:
        """An empty directory ``name`` next to the copy (a test run's HOME or TMPDIR)."""
        target = self.root / name
        if target.is_symlink() or target.is_file():  # whatever the last test run put there
            target.unlink()
        elif target.exists():
            shutil.rmtree(target, ignore_errors=True)
        if target.exists():  # the last run left something it cannot remove: start another
            return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))
        target.mkdir()
        return target

    def relative(self, target: Path) -> str:
        """``target`` as a repository-relative POSIX path (``.`` for the root)."""
        return target.relative_to(self.path).as_posix() or "."


def _walk(sandbox: Sandbox, root: Path) -> Iterator[Path]:
    """Files under ``root`` (a resolved path, or a file itself), sorted, skipping caches and bytecode.

    Symlinked directories are not entered (one may lead outside the sandbox, or in a loop); a
    symlinked file is kept only if it resolves to a regular file inside the sandbox. Anything
    else that is not a regular file (a FIFO, a socket) is skipped.
    """
    if not root.is_dir():
        if root.is_file():
            yield root
        return
    with os.scandir(root) as found:
        entries = sorted(found, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        if entry.is_symlink():
            real = sandbox.inside(path)
            if real is not None and real.is_file() and not entry.name.endswith(SKIP_SUFFIXES):
                yield path
        elif entry.is_dir(follow_symlinks=False):
            if entry.name not in SKIP_DIRS:
                yield from _walk(sandbox, path)
        elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(SKIP_SUFFIXES):
            yield path


def _open_file(target: Path, shown: str, flags: int) -> int:
    """Open a file already found inside the sandbox, refusing what could lead out of it since."""
    # O_NOFOLLOW: a symlink swapped in after the check; O_NONBLOCK: a FIFO must not hang the tool.
    # O_BINARY (Windows): bytes as they are, no newline translation, no stop at Ctrl-Z.
    extra = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    extra |= getattr(os, "O_BINARY", 0)
    fd = os.open(target, flags | extra)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"not a regular file: {shown}")
        if info.st_nlink > 1:  # a hard link shares its content with a path that may be outside
            raise ToolError(f"{shown} has other hard links; the tools do not read or write through them")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_text(target: Path, shown: str) -> str:
    """A file's text, newlines untouched; ``ToolError`` for binary files."""
    with open(_open_file(target, shown, os.O_RDONLY), "rb") as handle:
        data = handle.read()
    if b"\0" in data:
        raise ToolError(f"not a text file: {shown}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"not a UTF-8 text file: {shown}") from None


def _existing_file(sandbox: Sandbox, path: str) -> Path:
    target = sandbox.resolve(path)
    if target.is_dir():
        raise ToolError(f"{path} is a directory (use list_files to see what is in it)")
    if not target.is_file():
        raise ToolError(f"no such file: {path}")
    return target


def _reports_errors(tool: Tool) -> Tool:
    """Turn a tool's ``ToolError`` (and file-system errors) into ``error: ...`` text."""

    @functools.wraps(tool)
    def run(sandbox: Sandbox, **arguments: Any) -> str:
        try:
            return tool(sandbox, **arguments)
        except ToolError as exc:
            return f"{ERROR_PREFIX}{exc}"
        except OSError as exc:
            return f"{ERROR_PREFIX}{exc.strerror or exc}"
        except ValueError as exc:  # what the OS refuses in a name or a text: the model may retry
            return f"{ERROR_PREFIX}{exc}"

    return run


# ---------------------------------------------------------------- the tools


@_reports_errors
def list_files(sandbox: Sandbox, path: str = ".") -> str:
    """Every file under ``path``, one repository-relative path a line, sorted.

    >>> with Sandbox() as box:
    ...     print(list_files(box, path="tally"))
    tally/__init__.py
    tally/discounts.py
    tally/invoice.py
    tally/money.py
    tally/render.py
    tally/tax.py
    tally/terms.py
    """
    root = sandbox.resolve(path)
    if not root.exists():
        raise ToolError(f"no such directory: {path}")
    files = [sandbox.relative(f) for f in _walk(sandbox, root)]
    if not files:
        return f"(no files under {path})"
    shown = files[:MAX_LISTED]
    if len(files) > MAX_LISTED:
        shown.append(f"... ({len(files) - MAX_LISTED} more files; list a subdirectory to see them)")
    return "\n".join(shown)


@_reports_errors
def read_file(sandbox: Sandbox, path: str) -> str:
    """A text file's content with line numbers, as ``"  12  text"``.

    >>> with Sandbox() as box:
    ...     print(read_file(box, path="tally/discounts.py").splitlines()[0])
    ...     print(read_file(box, path="../secrets.txt"))
       1  \"\"\"Discounts taken off a line's gross amount.
    error: path is outside the repository: ../secrets.txt
    """
    target = _existing_file(sandbox, path)
    lines = _read_text(target, path).splitlines()
    if not lines:
        return f"({path} is empty)"
    width = max(4, len(str(min(len(lines), MAX_LINES))))
    numbered = [f"{i:>{width}}  {line}" for i, line in enumerate(lines[:MAX_LINES], start=1)]
    if len(lines) > MAX_LINES:
        numbered.append(f"... ({len(lines) - MAX_LINES} more lines not shown)")
    return "\n".join(numbered)


@_reports_errors
def search(sandbox: Sandbox, pattern: str, path: str = ".") -> str:
    """Lines matching a Python regular expression, as ``file:line: text``, in text files under ``path``.

    >>> with Sandbox() as box:
    ...     print(search(box, pattern=r"class \\w+Discount\\b"))
    tally/discounts.py:84: class VolumeDiscount(Discount):
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"bad regular expression {pattern!r}: {exc}") from None
    root = sandbox.resolve(path)
    if not root.exists():
        raise ToolError(f"no such file or directory: {path}")
    found: list[str] = []
    for file in _walk(sandbox, root):
        real = sandbox.inside(file)
        if real is None:
            continue
        try:
            text = _read_text(real, path)
        except (ToolError, OSError):
            continue  # binary files are skipped, as grep -I does, and so is what cannot be read
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                if len(found) == MAX_MATCHES:
                    found.append(f"... (stopped at {MAX_MATCHES} matches; narrow the pattern or the path)")
                    return "\n".join(found)
                shown = line if len(line) <= MAX_MATCH_CHARS else line[:MAX_MATCH_CHARS] + " ..."
                found.append(f"{sandbox.relative(file)}:{number}: {shown}")
    if not found:
        return f"no matches for {pattern!r} under {path}"
    return "\n".join(found)


@_reports_errors
def apply_patch(sandbox: Sandbox, path: str, old: str, new: str) -> str:
    """Replace the one occurrence of ``old`` in a file with ``new``; returns the change as a unified diff.

    >>> with Sandbox() as box:
    ...     print(apply_patch(box, path="tally/terms.py", old="SATURDAY = 5", new="SATURDAY = 5  # Mon = 0"))
    --- a/tally/terms.py
    +++ b/tally/terms.py
    @@ -23,3 +23,3 @@
    <BLANKLINE>
    -SATURDAY = 5
    +SATURDAY = 5  # Mon = 0
    <BLANKLINE>
    """
    target = _existing_file(sandbox, path)
    if not old:
        raise ToolError("old must not be empty (quote the exact text to replace)")
    if old == new:
        raise ToolError("old and new are the same; nothing to change")
    before = _read_text(target, path)
    count = before.count(old)
    if count == 0:
        raise ToolError(
            f"old text not found in {path} (it must match exactly, whitespace included; read the file again)"
        )
    if count > 1:
        raise ToolError(f"old text occurs {count} times in {path}; add surrounding lines to pick one")
    after = before.replace(old, new, 1)
    data = after.encode("utf-8")  # before opening: a text that cannot be encoded changes nothing
    with open(_open_file(target, path, os.O_WRONLY), "wb") as handle:
        handle.truncate(0)
        handle.write(data)
    return _diff(before, after, sandbox.relative(target))


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{name}", f"b/{name}", n=1, lineterm=""
    )
    return "\n".join(lines)


@_reports_errors
def run_tests(sandbox: Sandbox, *, timeout_s: float | None = None) -> str:
    """Run the repository's unittest suite, confined; returns its output and an ``exit status`` line.

    ``timeout_s``: the time limit (default: the sandbox's ``test_timeout_s``, else
    ``TEST_TIMEOUT_S``); the model cannot set it, its calls take no arguments. See the module's
    docstring for what the run may and may not do. Paths in the output are shown relative to
    the repository, so the text does not depend on where the sandbox lives.

    >>> with Sandbox() as box:
    ...     print(run_tests(box).splitlines()[-1])
    exit status: 1 (failed)
    """
    _tell_sandbox_gaps()
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


def _relative_output(raw: bytes | str, sandbox: Sandbox) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.replace(str(sandbox.path) + os.sep, "").rstrip()
    if len(text) > MAX_TEST_OUTPUT:
        cut = len(text) - MAX_TEST_OUTPUT
        text = f"... ({cut} earlier characters of output not shown)\n{text[cut:]}"
    return text


# ---------------------------------------------------------------- specs and dispatch

TOOLS: dict[str, Tool] = {
    "list_files": list_files,
    "read_file": read_file,
    "search": search,
    "apply_patch": apply_patch,
    "run_tests": run_tests,
}


def _function(name: str, description: str, **properties: str) -> dict[str, Any]:
    """A strict function tool whose arguments are all required strings."""
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
            "required": list(properties),
            "additionalProperties": False,
        },
        "strict": True,
    }


TOOL_SPECS: list[dict[str, Any]] = [
    _function(
        "list_files",
        "List every file under a directory of the repository, recursively, one relative path per line "
        "(caches and bytecode are skipped).",
        path='Directory relative to the repository root; "." for the whole repository.',
    ),
    _function(
        "read_file",
        "Read a text file of the repository. Each line is prefixed with its line number.",
        path="File path relative to the repository root, e.g. tally/money.py.",
    ),
    _function(
        "search",
        "Search text files for lines matching a Python regular expression. "
        "Returns file:line: text for each match, at most 200.",
        pattern="Python regular expression matched against each line, e.g. def parse_\\w+.",
        path='File or directory to search, relative to the repository root; "." for everything.',
    ),
    _function(
        "apply_patch",
        "Edit a file by replacing one exact occurrence of old with new. old must occur exactly once in "
        "the file, whitespace included. Returns a unified diff of the change.",
        path="File path relative to the repository root.",
        old="The exact text to replace, copied from the file without line numbers; must be unique.",
        new="The replacement text.",
    ),
    _function(
        "run_tests",
        "Run the repository's test suite (python -m unittest) and return its output and exit status.",
    ),
]
SPECS_BY_NAME = {spec["name"]: spec for spec in TOOL_SPECS}


def run_tool(sandbox: Sandbox, name: str, arguments_json: str) -> str:
    """Run one function call from the model: ``name`` with its JSON-encoded arguments.

    >>> with Sandbox() as box:
    ...     print(run_tool(box, "read_file", '{"path": "nope.py"}'))
    ...     print(run_tool(box, "read_file", '{"path": '))
    ...     print(run_tool(box, "delete_everything", '{}'))
    error: no such file: nope.py
    error: arguments are not valid JSON: Expecting value at line 1 column 10
    error: unknown tool 'delete_everything' (available: list_files, read_file, search, apply_patch, run_tests)
    """
    _tell_sandbox_gaps()
    tool, spec = TOOLS.get(name), SPECS_BY_NAME.get(name)
    if tool is None or spec is None:
        return f"{ERROR_PREFIX}unknown tool {name!r} (available: {', '.join(TOOLS)})"
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        return f"{ERROR_PREFIX}arguments are not valid JSON: {exc.msg} at {where}"
    if not isinstance(arguments, dict):
        return f"{ERROR_PREFIX}arguments must be a JSON object, got {type(arguments).__name__}"
    problem = _argument_problem(spec, arguments)
    if problem:
        return f"{ERROR_PREFIX}bad arguments for {name}: {problem}"
    return tool(sandbox, **arguments)


def _argument_problem(spec: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What is wrong with ``arguments`` for a tool, or ``None``.

    Lenient where it costs nothing: a missing argument that has a default (``path``
    of list_files and search) is allowed, as non-strict clients may leave it out.
    """
    properties = spec["parameters"]["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        return f"unexpected argument(s) {', '.join(unknown)}; expected {', '.join(properties) or 'none'}"
    for key, value in arguments.items():
        if not isinstance(value, str):
            return f"{key} must be a string, got {type(value).__name__}"
    defaults = {"path"} if spec["name"] in ("list_files", "search") else set()
    missing = [key for key in properties if key not in arguments and key not in defaults]
    if missing:
        return f"missing argument(s) {', '.join(missing)}"
    return None
