"""Checks run inside the environment the README's main command builds (see .ci/check-main-env).

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
README = REPO / "README.md"
README_URL = "http://127.0.0.1:8765/v1"
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


def readme_python_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    if not blocks:
        raise AssertionError("README.md has no ```python blocks")
    return blocks


def run_readme_block(block: str) -> None:
    """Run a README example; one written against a running `labkit serve` gets its own server."""
    if f'base_url="{README_URL}"' in block:
        from labkit.client.launcher import LabkitServer

        with LabkitServer() as server:
            exec(block.replace(README_URL, server.base_url), {"__name__": "__main__"})
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
    for number, block in enumerate(readme_python_blocks(), 1):
        first_line = block.strip().splitlines()[0]
        with step(f"README python block {number} ({first_line})"):
            run_readme_block(block)
    with step("labkit " + " ".join(COMPARE_ARGS)):
        run_compare()


if __name__ == "__main__":
    main()
