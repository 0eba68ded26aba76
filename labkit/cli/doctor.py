"""``labkit doctor``: a workshop laptop's pre-flight check, one module so it reads in the order it prints.

Each check prints one line, ``ok``, ``warn`` or ``FAIL`` and what it found; a warning or a
failure adds a line saying what to run or change. The exit status is 1 if any check failed
(warnings do not fail it):

    $ labkit doctor
    ok    python     3.11.9 (labkit needs >=3.11)
    ...
    labkit doctor: 8 checks, all ok (6.2 s)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import importlib.util
import platform
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from labkit.cli.serve import DEFAULT_PORT

OK, WARN, FAIL = "ok", "warn", "FAIL"
DIST = "labkit"
INSTALL_FIX = 'pip install -e ".[notebooks]"'  # from the clone, as the README's Quick start does
NOTEBOOK_MODULES = ("jupyterlab", "ipywidgets", "anywidget", "ipykernel")
# JupyterLab runs as a program of its own, never in the kernel: found, not imported (that takes seconds).
FOUND_NOT_IMPORTED = ("jupyterlab",)
IPYKERNEL_NEEDED = ">=7"  # live plots update while a cell awaits only from ipykernel 7 on
LOOPBACK = "127.0.0.1"
# Scanning 0.22 ms plus tokenizing 0.21 ms per 1k tokens, as ``lab.cpu_costs()`` measures them:
# the machine the documentation's tables come from (2 cores, Linux).
REFERENCE_MS_PER_1K = 0.43
SMOKE_ARGS = ["--profile", "local"]
SMOKE_SCENARIO = "synthetic:turns=3,output_tokens=20,tool_tokens=200,instruction_tokens=200"
SMOKE_DESIGN = "websocket"
SMOKE_TIMEOUT_S = 10.0  # a 3-turn local rollout takes well under a second; more means it hangs
TIMED_FROM_S = 0.1  # a check's time is shown from here on: the quick ones would only add noise


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``ok``, ``warn`` or ``FAIL``, what was found and, unless ok, the fix.

    >>> Finding("port", OK, "127.0.0.1:0 gave port 40123").status
    'ok'
    """

    name: str
    status: str
    found: str
    fix: str = ""


# Requirements are read with ``packaging`` (a base dependency); without it, only for presence.


def _version_of(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet(requirement: str, version_of: Callable[[str], str | None] | None = None) -> str | None:
    """What is wrong with one requirement (``"pandas>=2"``) here, or None if it is met.

    >>> unmet("pandas>=2", lambda name: "1.5.3")
    'pandas 1.5.3 (needs >=2)'
    >>> unmet("pandas>=2", lambda name: None)
    'pandas missing'
    """
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no packaging: the name is all that can be read safely
        name, specifier = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0], ""
    else:
        parsed = Requirement(requirement)
        name, specifier = parsed.name, str(parsed.specifier)
    installed = (version_of or _version_of)(name)
    if installed is None:
        return f"{name} missing"
    if specifier:
        from packaging.specifiers import SpecifierSet

        if not SpecifierSet(specifier).contains(installed, prereleases=True):
            return f"{name} {installed} (needs {specifier})"
    return None


def _base_requirements() -> list[str]:
    """labkit's own dependencies, without the extras'."""
    return [r for r in importlib.metadata.requires(DIST) or [] if "extra ==" not in r]


def _requirement_of(name: str) -> str:
    """A base requirement by its name, as pip takes it: ``"pandas>=2"``."""
    for req in _base_requirements():
        if re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower() == name.lower():
            return req.split(";")[0].replace(" ", "")
    return name


# The checks, one function each, in the order they print.


def check_python() -> Finding:
    """The running Python against labkit's ``requires-python``."""
    needed = importlib.metadata.metadata(DIST).get("Requires-Python") or ""
    running = platform.python_version()
    found = f"{running} (labkit needs {needed or 'any'})"
    if not needed or unmet(f"python{needed}", lambda name: running) is None:
        return Finding("python", OK, found)
    return Finding("python", FAIL, found, f"install Python {needed} and recreate the .venv with it")


def check_install() -> Finding:
    """labkit's modules import and its base dependencies meet their versions."""
    problems = [p for r in _base_requirements() if (p := unmet(r))]
    if problems:
        names = [p.split()[0] for p in problems]
        fix = "pip install " + " ".join(f'"{_requirement_of(n)}"' for n in names)
        return Finding("install", FAIL, ", ".join(problems), fix)
    try:
        for module in ("labkit.server.app", "labkit.lab"):  # the server's and the notebooks' entry
            importlib.import_module(module)
    except Exception as e:  # anything an import raises means the install is broken
        return Finding("install", FAIL, f"import {module}: {type(e).__name__}: {e}", INSTALL_FIX)
    version = importlib.metadata.version(DIST)
    return Finding("install", OK, f"labkit {version}, {len(_base_requirements())} dependencies met")


def check_tokenizer() -> Finding:
    """The shipped ranks file passes its SHA-256 check."""
    from labkit.text import tokenizer

    try:
        ranks = tokenizer.load_ranks(tokenizer.RANKS_FILE)  # read now, so a moved file is seen
    except (tokenizer.TokenizerFileError, OSError, ValueError) as e:
        return Finding("tokenizer", FAIL, str(e), f"reinstall labkit: {INSTALL_FIX}")
    return Finding("tokenizer", OK, f"cl100k_base, {len(ranks)} ranks, hash checked")


def _importable(module: str) -> bool:
    """Whether a module imports (or, for JupyterLab, is found where it would be imported from)."""
    try:
        if module in FOUND_NOT_IMPORTED:
            return importlib.util.find_spec(module) is not None
        importlib.import_module(module)
    except Exception:  # a broken install raises anything, not only ImportError
        return False
    return True


def check_notebooks() -> Finding:
    """JupyterLab and the widget front end import, with an ipykernel new enough for live plots."""
    missing = [m for m in NOTEBOOK_MODULES if not _importable(m)]
    if missing:
        return Finding("notebooks", FAIL, f"cannot import {', '.join(missing)}", INSTALL_FIX)
    problem = unmet(f"ipykernel{IPYKERNEL_NEEDED}")
    if problem:
        return Finding("notebooks", FAIL, f"{problem}: live plots would not update", INSTALL_FIX)
    versions = ", ".join(f"{m} {_version_of(m)}" for m in NOTEBOOK_MODULES)
    return Finding("notebooks", OK, versions)


def check_port() -> Finding:
    """A free port on loopback (what notebooks use), and whether ``labkit serve``'s default is free."""
    from labkit.cli.checks import CommandError
    from labkit.cli.serve import bind

    try:
        with bind(LOOPBACK, 0) as sock:
            free = sock.getsockname()[1]
    except CommandError as e:
        return Finding(
            "port", FAIL, str(e), "allow Python to listen on 127.0.0.1 (firewall or security tool)"
        )
    try:
        bind(LOOPBACK, DEFAULT_PORT).close()
    except CommandError as e:
        return Finding(
            "port",
            WARN,
            f"{LOOPBACK}:0 gave port {free}, but {e}",
            f"stop what holds {DEFAULT_PORT}, or run labkit serve --port 0 "
            "(notebooks pick a free port anyway)",
        )
    return Finding("port", OK, f"{LOOPBACK}:0 gave port {free}; {DEFAULT_PORT} is free too")


def timer_step() -> tuple[float, bool]:
    """The event loop's timer step in seconds, in a fresh loop, with the server's timer request
    held (Windows' 1 ms ticks; nothing elsewhere); and whether the OS granted that request."""
    from labkit.engine import timing
    from labkit.server.edge.timer import fine_system_timer

    with fine_system_timer() as granted:
        return asyncio.run(timing.calibrate()), granted


def check_timer() -> Finding:
    """Whether modeled delays can sleep on the loop's timer or need the precise (spinning) sleep."""
    from labkit.engine import timing

    step, granted = timer_step()
    found = f"a 1 ms sleep takes {step * 1000:.2f} ms"
    if not timing.is_coarse(step):
        return Finding("timer", OK, found)
    windows = ""
    if sys.platform == "win32":
        windows = " (the server asks Windows for 1 ms ticks while it runs: " + (
            "granted, yet still coarse)" if granted else "refused here)"
        )
    return Finding(
        "timer",
        WARN,
        f"{found}, coarser than {timing.COARSE_TIMER_S * 1000:.0f} ms{windows}",
        "modeled delays will use the precise sleep, which costs CPU; close programs that load the CPU "
        "and plug the laptop in",
    )


def compare_cpu(ms_per_1k: float, reference: float = REFERENCE_MS_PER_1K) -> str:
    """This machine against the reference one, and what that does to the notebooks' numbers.

    >>> print(compare_cpu(1.5, 0.75))
    about 2.0× the reference machine's 0.75 ms: the API service's share in the notebooks will be larger
    """
    ratio = ms_per_1k / reference
    if ratio > 1.25:
        effect = "larger"
    elif ratio < 0.8:
        effect = "smaller"
    else:
        effect = "about the same"
    return (
        f"about {ratio:.1f}× the reference machine's {reference:.2f} ms: "
        f"the API service's share in the notebooks will be {effect}"
    )


def check_cpu() -> Finding:
    """This machine's CPU cost per 1k tokens, as the notebooks measure it (``lab.cpu_costs()``)."""
    from labkit import lab

    costs = lab.cpu_costs()
    found = f"{costs.per_1k_shown()}, {compare_cpu(costs.per_1k_ms)}"
    if costs.per_1k_ms / REFERENCE_MS_PER_1K > 3:  # the notebooks still run, their numbers drift
        return Finding(
            "cpu", WARN, found, "close programs that load the CPU and plug the laptop in (power saving)"
        )
    return Finding("cpu", OK, found)


def _rollout_in_thread(base_url: str) -> tuple[threading.Thread, dict]:
    """Run the smoke rollout in a thread, so a hung one is given up on instead of waited for."""
    from labkit.client.agent import Rollout

    outcome: dict = {}

    def run() -> None:
        start = time.perf_counter()
        try:
            outcome["rollout"] = Rollout.run(base_url, SMOKE_DESIGN, SMOKE_SCENARIO)
        except Exception as e:  # reported as the check's failure, not a traceback
            outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=run, name="labkit-doctor-smoke", daemon=True)
    thread.start()
    return thread, outcome


def check_smoke() -> Finding:
    """A short rollout over WebSocket mode against a real ``labkit serve``, end to end."""
    from labkit.client.launcher import LabkitServer, ServerStartError
    from labkit.scenarios import parse_synthetic

    turns = parse_synthetic(SMOKE_SCENARIO).turns
    fix = f"run labkit serve {' '.join(SMOKE_ARGS)} and read its error"
    started = time.perf_counter()
    try:
        with LabkitServer(args=SMOKE_ARGS) as server:
            ready = time.perf_counter() - started
            thread, outcome = _rollout_in_thread(server.base_url)
            thread.join(SMOKE_TIMEOUT_S)
    except ServerStartError as e:
        last = [line for line in str(e).splitlines() if line.strip()][-1]
        return Finding("smoke", FAIL, f"the server did not start: {last}", fix)
    if thread.is_alive():
        return Finding("smoke", FAIL, f"the rollout did not finish within {SMOKE_TIMEOUT_S:.0f} s", fix)
    if "error" in outcome:
        return Finding("smoke", FAIL, f"the rollout failed: {outcome['error']}", fix)
    done = len(outcome["rollout"].records)
    if done != turns:
        return Finding("smoke", FAIL, f"the rollout ended after {done} of {turns} turns", fix)
    return Finding(
        "smoke",
        OK,
        f"{turns} turns over {SMOKE_DESIGN} in {outcome['seconds']:.2f} s end to end "
        f"(server ready in {ready:.1f} s)",
    )


CHECKS: list[Callable[[], Finding]] = [
    check_python,
    check_install,
    check_tokenizer,
    check_notebooks,
    check_port,
    check_timer,
    check_cpu,
    check_smoke,
]


def run_check(check: Callable[[], Finding]) -> tuple[Finding, float]:
    """One check and its seconds; a check that raises is a failure, not a traceback."""
    start = time.perf_counter()
    try:
        finding = check()
    except Exception as e:
        name = check.__name__.removeprefix("check_")
        finding = Finding(name, FAIL, f"the check itself failed: {type(e).__name__}: {e}", INSTALL_FIX)
    return finding, time.perf_counter() - start


def format_finding(finding: Finding, seconds: float) -> str:
    """The check's line, and its fix on the next one unless it passed.

    >>> print(format_finding(Finding("port", WARN, "8765 is taken", "use --port 0"), 0.01))
    warn  port       8765 is taken
          fix: use --port 0
    """
    timed = f" ({seconds:.1f} s)" if seconds >= TIMED_FROM_S else ""
    line = f"{finding.status:<5} {finding.name:<10} {finding.found}{timed}"
    return line if finding.status == OK or not finding.fix else f"{line}\n      fix: {finding.fix}"


def doctor_command(args: argparse.Namespace) -> None:
    """Run every check, printing each as it finishes; exit 1 if any failed."""
    checks = [c for c in CHECKS if not (args.skip_smoke and c is check_smoke)]
    start, failed, warned = time.perf_counter(), 0, 0
    for check in checks:
        finding, seconds = run_check(check)
        print(format_finding(finding, seconds), flush=True)
        failed += finding.status == FAIL
        warned += finding.status == WARN
    verdict = f"{failed} failed" if failed else "all ok" if not warned else f"ok, {warned} warned"
    print(f"labkit doctor: {len(checks)} checks, {verdict} ({time.perf_counter() - start:.1f} s)")
    if failed:
        sys.exit(1)
