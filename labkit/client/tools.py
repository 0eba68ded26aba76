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
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

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

Tool = Callable[..., str]


class ToolError(Exception):
    """A tool could not do what it was asked; its message goes back to the model as text."""


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

    def __init__(self, source: str | Path = SAMPLE_REPO) -> None:
        source = Path(source)
        if not source.is_dir():
            raise FileNotFoundError(f"no repository to copy at {source}")
        self.source = source
        self._tmp = tempfile.TemporaryDirectory(prefix="labkit-sandbox-")
        # Resolved, so containment checks compare like with like (e.g. macOS's /private/var).
        self.path = Path(self._tmp.name).resolve() / (source.resolve().name or "repo")
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
        if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
            raise ToolError(f"path must be relative to the repository root: {path}")
        target = (self.path / text).resolve()
        if not target.is_relative_to(self.path):
            raise ToolError(f"path is outside the repository: {path}")
        return target

    def relative(self, target: Path) -> str:
        """``target`` as a repository-relative POSIX path (``.`` for the root)."""
        return target.relative_to(self.path).as_posix() or "."


def _walk(root: Path) -> Iterator[Path]:
    """Files under ``root`` (or ``root`` itself if a file), sorted, skipping caches and bytecode."""
    if root.is_file():
        yield root
        return
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.is_dir():
            if entry.name not in SKIP_DIRS:
                yield from _walk(entry)
        elif not entry.name.endswith(SKIP_SUFFIXES):
            yield entry


def _read_text(target: Path, shown: str) -> str:
    """A file's text, newlines untouched; ``ToolError`` for binary files."""
    data = target.read_bytes()
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
    files = [sandbox.relative(f) for f in _walk(root)]
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
    for file in _walk(root):
        try:
            text = _read_text(file, path)
        except ToolError:
            continue  # binary files are skipped, as grep -I does
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
    with open(target, "w", encoding="utf-8", newline="") as handle:
        handle.write(after)
    return _diff(before, after, sandbox.relative(target))


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{name}", f"b/{name}", n=1, lineterm=""
    )
    return "\n".join(lines)


@_reports_errors
def run_tests(sandbox: Sandbox) -> str:
    """Run the repository's unittest suite; returns its output and an ``exit status`` line.

    Paths in the output are shown relative to the repository, so the text
    does not depend on where the sandbox lives.

    >>> with Sandbox() as box:
    ...     print(run_tests(box).splitlines()[-1])
    exit status: 1 (failed)
    """
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run(
            [sys.executable, *TEST_COMMAND],
            cwd=sandbox.path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=TEST_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        partial = _relative_output(exc.output or b"", sandbox)
        raise ToolError(f"tests timed out after {TEST_TIMEOUT_S:g} s\n{partial}".rstrip()) from None
    verdict = "passed" if done.returncode == 0 else "failed"
    output = _relative_output(done.stdout, sandbox)
    return f"{output}\n\nexit status: {done.returncode} ({verdict})".lstrip()


def _relative_output(raw: bytes | str, sandbox: Sandbox) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text.replace(str(sandbox.path) + os.sep, "").rstrip()


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
