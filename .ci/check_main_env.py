"""Checks run inside the environment the README's main command builds (see .ci/check-main-env).

Every Python example of the README and of the guides in docs/ runs here, as printed.

Not a test module: that environment has no pytest. Each step prints its time; any failure
raises, so the process exits non-zero.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_URL = "http://127.0.0.1:8765/v1"
# The wire references show fragments of a session already open (`conn`, `create_body`), not
# programs to copy whole; every other guide's examples run as printed.
FRAGMENTS = ("docs/protocol.md", "docs/appended.md")
COMPARE_ARGS = [
    "compare",
    "--tps", "1000",
    "--designs", "naive,websocket",
    "--repeat", "1",
    "--scenario", "synthetic:turns=3,tool_tokens=200,instruction_tokens=500",
    "--profile", "local",
]  # fmt: skip


@contextmanager
def step(name: str) -> Iterator[None]:
    print(f"[check-main-env] {name}", flush=True)
    start = time.perf_counter()
    yield
    print(f"[check-main-env]   ok ({time.perf_counter() - start:.1f} s)", flush=True)


def import_every_module() -> int:
    import labkit

    count = 0
    for module in pkgutil.walk_packages(labkit.__path__, "labkit.", onerror=_raise):
        if module.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing it runs the command line
        importlib.import_module(module.name)
        count += 1
    return count


def _raise(name: str) -> None:
    raise ImportError(f"cannot import {name}")


def example_documents() -> list[Path]:
    """The files a user copies Python examples from: the README, then the guides in docs/."""
    guides = [path for path in sorted(REPO.glob("docs/*.md")) if f"docs/{path.name}" not in FRAGMENTS]
    return [REPO / "README.md", *guides]


def python_examples() -> list[tuple[str, str]]:
    """Every top-level ```python block of those files, with the file it is in.

    >>> any(name == "docs/setups.md" and EXAMPLE_URL in block for name, block in python_examples())
    True
    """
    examples = [
        (path.relative_to(REPO).as_posix(), block)
        for path in example_documents()
        for block in re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)
    ]
    if not examples:
        raise AssertionError("README.md and docs/*.md have no ```python blocks")
    return examples


def run_example(block: str) -> None:
    """Run a README or docs example; one written against a running `labkit serve` gets its own server."""
    if f'base_url="{EXAMPLE_URL}"' in block:
        from labkit.client.launcher import LabkitServer

        with LabkitServer() as server:
            exec(block.replace(EXAMPLE_URL, server.base_url), {"__name__": "__main__"})
    else:
        exec(block, {"__name__": "__main__"})


def run_compare() -> None:
    # The console script beside this Python: bin/labkit, or Scripts\labkit.exe on Windows.
    labkit_command = shutil.which("labkit", path=str(Path(sys.executable).parent))
    if labkit_command is None:
        raise AssertionError(f"no labkit command beside {sys.executable}")
    result = subprocess.run(
        [labkit_command, *COMPARE_ARGS], capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        raise AssertionError(
            f"labkit compare exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    missing = [design for design in ("naive", "websocket") if design not in result.stdout]
    if missing:
        raise AssertionError(f"labkit compare's output does not name {missing}:\n{result.stdout}")


def main() -> None:
    with step("import every module under labkit/"):
        print(f"[check-main-env]   {import_every_module()} modules")
    for number, (name, block) in enumerate(python_examples(), 1):
        first_line = block.strip().splitlines()[0]
        with step(f"python example {number}, {name} ({first_line})"):
            run_example(block)
    with step("labkit " + " ".join(COMPARE_ARGS)):
        run_compare()


if __name__ == "__main__":
    main()
