"""Checks run inside the base install alone (see .ci/check-base-install): ``pip install .``, no
extra, which the README says holds everything but the notebook front end.

Not a test module: that environment has no pytest. Each step prints its time; any failure
raises, so the process exits non-zero.

- labkit is the installed copy (the wheel's, not the checkout's), and finds its data in it;
- every module under labkit imports, but the notebook front end's, which may need nothing more
  than the notebooks extra (a missing module is then one of that extra's distributions);
- ``labkit --version`` runs from the console script;
- a rollout of the default scenario on a server of its own (real tools on the shipped sample
  repository), its table styled with units and a glossary entry shown: pandas' Styler, which
  needs jinja2 at use.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def step(name: str) -> Iterator[None]:
    print(f"[check-base-install] {name}", flush=True)
    start = time.perf_counter()
    yield
    print(f"[check-base-install]   ok ({time.perf_counter() - start:.1f} s)", flush=True)


def canonical(name: str) -> str:
    """A distribution or module name as PEP 503 compares them: ``Jinja2`` is ``jinja2``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def notebooks_extra() -> set[str]:
    """The distributions pyproject.toml's notebooks extra adds, by canonical name."""
    with (REPO / "pyproject.toml").open("rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["notebooks"]
    return {canonical(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]) for requirement in extra}


def installed_copy() -> str:
    import labkit
    from labkit.paths import default_data_dir

    where = Path(labkit.__file__).resolve()
    if where.is_relative_to(REPO):
        raise AssertionError(f"labkit was imported from the checkout ({where}), not the install")
    data = default_data_dir().resolve()
    if not data.is_relative_to(where.parent):
        raise AssertionError(f"the installed labkit reads its data from {data}, outside {where.parent}")
    return str(where.parent)


def import_every_module() -> tuple[int, list[str]]:
    """How many modules imported, and the front end's modules left for the notebooks extra."""
    import labkit

    extra, imported, front_end = notebooks_extra(), 0, []
    for module in pkgutil.walk_packages(labkit.__path__, "labkit.", onerror=_raise):
        if module.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing it runs the command line
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as missing:
            top = (missing.name or "").split(".")[0]
            if canonical(top) not in extra:
                raise
            front_end.append(f"{module.name} (needs {top}, from the notebooks extra)")
            continue
        imported += 1
    return imported, front_end


def _raise(name: str) -> None:
    raise ImportError(f"cannot import {name}")


def labkit_version() -> str:
    labkit_command = shutil.which("labkit", path=str(Path(sys.executable).parent))
    if labkit_command is None:
        raise AssertionError(f"no labkit command beside {sys.executable}")
    result = subprocess.run(
        [labkit_command, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0 or "labkit" not in result.stdout:
        raise AssertionError(f"labkit --version: {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result.stdout.strip()


def rollout_and_tables() -> str:
    from labkit import lab
    from labkit.scenarios import DEFAULT_SCENARIO

    with lab.LabkitServer(args=["--profile", "local"]) as server:
        rollout = lab.Rollout.run(server.base_url, "websocket", DEFAULT_SCENARIO)
    frame = rollout.frame()
    table = lab.styled(lab.compare({"websocket": frame})).to_html()
    glossary = lab.define(["render"]).to_html()
    if "end to end" not in table or "render" not in glossary:
        raise AssertionError("the styled table or the glossary entry came out empty")
    return f"{lab.summary(frame)['turns']} turns of {DEFAULT_SCENARIO}, a styled table, a glossary entry"


def main() -> None:
    with step("labkit is the installed copy, with its data"):
        print(f"[check-base-install]   {installed_copy()}")
    with step("import every module under labkit/"):
        imported, front_end = import_every_module()
        print(f"[check-base-install]   {imported} modules; the front end's, left for the notebooks extra:")
        for line in front_end:
            print(f"[check-base-install]     {line}")
    with step("labkit --version"):
        print(f"[check-base-install]   {labkit_version()}")
    with step("a rollout on a server of its own, its tables shown"):
        print(f"[check-base-install]   {rollout_and_tables()}")


if __name__ == "__main__":
    main()
