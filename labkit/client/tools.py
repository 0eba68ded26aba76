"""The agent's five tools over a sandbox copy of a repository: the client's share of every turn.

Each tool is a plain function ``tool(sandbox, **arguments) -> str`` returning the text the model
will see; failures come back as text starting with ``"error: "`` and are never raised, because a
real agent shows its model the error and lets it try again. Where the files live and how the tools
stay inside them is ``labkit.client.sandbox``; how ``run_tests`` is confined is
``labkit.client.runner``.

``TOOL_SPECS`` are the tools as Responses API function definitions (strict mode), and
``run_tool`` runs a function call as it arrives on the wire:

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
from collections.abc import Callable
from typing import Any

from labkit.client import runner
from labkit.client.sandbox import Sandbox, ToolError, existing_file, open_file, read_text, walk

ERROR_PREFIX = "error: "
MAX_LISTED = 1000  # files list_files shows before it says it stopped
MAX_LINES = 2000  # lines read_file shows before it says it stopped
MAX_MATCHES = 200  # matches search shows before it says it stopped
MAX_MATCH_CHARS = 240  # a matching line longer than this is cut

Tool = Callable[..., str]


def is_error(output: str) -> bool:
    """Whether a tool's output reports a failure.

    >>> is_error("error: no such file: x.py"), is_error("   1  import os")
    (True, False)
    """
    return output.startswith(ERROR_PREFIX)


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
    files = [sandbox.relative(f) for f in walk(sandbox, root)]
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
    target = existing_file(sandbox, path)
    lines = read_text(target, path).splitlines()
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
    for file in walk(sandbox, root):
        real = sandbox.inside(file)
        if real is None:
            continue
        try:
            text = read_text(real, path)
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
    target = existing_file(sandbox, path)
    if not old:
        raise ToolError("old must not be empty (quote the exact text to replace)")
    if old == new:
        raise ToolError("old and new are the same; nothing to change")
    before = read_text(target, path)
    count = before.count(old)
    if count == 0:
        raise ToolError(
            f"old text not found in {path} (it must match exactly, whitespace included; read the file again)"
        )
    if count > 1:
        raise ToolError(f"old text occurs {count} times in {path}; add surrounding lines to pick one")
    after = before.replace(old, new, 1)
    data = after.encode("utf-8")  # before opening: a text that cannot be encoded changes nothing
    with open(open_file(target, path, os.O_WRONLY), "wb") as handle:
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
    ``runner.TEST_TIMEOUT_S``); the model cannot set it, its calls take no arguments. See
    ``labkit.client.runner`` for what the run may and may not do.

    >>> with Sandbox() as box:
    ...     print(run_tests(box).splitlines()[-1])
    exit status: 1 (failed)
    """
    return runner.run_suite(sandbox, timeout_s=timeout_s)


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
    runner.tell_sandbox_gaps()
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
