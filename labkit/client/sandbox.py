"""A private copy of a repository for the agent's tools, and the file access that stays inside it.

A ``Sandbox`` copies a repository (``data/sample_repo`` unless told otherwise) into a fresh
temporary directory, so the agent can read, search, patch and test it without touching the
original. The tools (``labkit.client.tools``) reach its files through this module only:

>>> with Sandbox() as box:
...     [box.relative(f) for f in walk(box, box.resolve("tally"))][:2]
['tally/__init__.py', 'tally/discounts.py']

**Staying in the sandbox.** Every path is resolved, symlinks followed, and must land inside
the copy, or the tool answers with an error. ``walk`` (behind ``list_files`` and ``search``)
does not enter symlinked directories and skips a symlinked file unless it resolves to a file
inside the copy. A file is opened without following a symlink put in its place since the check,
and only if it is a regular file with no other hard link (one could be a file outside; a FIFO
would block).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from labkit.paths import default_data_dir

SAMPLE_REPO = default_data_dir() / "sample_repo"

SKIP_DIRS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv"})
SKIP_SUFFIXES = (".pyc", ".pyo")


class ToolError(Exception):
    """A tool could not do what it was asked; its message goes back to the model as text."""


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
        self.test_timeout_s = test_timeout_s  # None: labkit.client.runner.TEST_TIMEOUT_S
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


# ---------------------------------------------------------------- files inside it


def walk(sandbox: Sandbox, root: Path) -> Iterator[Path]:
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
                yield from walk(sandbox, path)
        elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(SKIP_SUFFIXES):
            yield path


def open_file(target: Path, shown: str, flags: int) -> int:
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


def read_text(target: Path, shown: str) -> str:
    """A file's text, newlines untouched; ``ToolError`` for binary files."""
    with open(open_file(target, shown, os.O_RDONLY), "rb") as handle:
        data = handle.read()
    if b"\0" in data:
        raise ToolError(f"not a text file: {shown}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"not a UTF-8 text file: {shown}") from None


def existing_file(sandbox: Sandbox, path: str) -> Path:
    """The sandbox path of a file that exists; ``ToolError`` for a directory or nothing there."""
    target = sandbox.resolve(path)
    if target.is_dir():
        raise ToolError(f"{path} is a directory (use list_files to see what is in it)")
    if not target.is_file():
        raise ToolError(f"no such file: {path}")
    return target
