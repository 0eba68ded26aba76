"""Packaging: the dependencies cover what labkit imports, the wheel ships data/ and finds it
when installed, and environment.yml asks for what pyproject.toml does."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "labkit"
DATA = REPO / "data"
PYPROJECT = REPO / "pyproject.toml"
ENVIRONMENT = REPO / "environment.yml"
POSTBUILD = REPO / "postBuild"

# What the wheel must hold, at the least (every file of data/ is checked as well).
WHEEL_DATA = [
    "labkit/_data/profiles/production-like.toml",
    "labkit/_data/profiles/local.toml",
    "labkit/_data/scenarios/fix-failing-test.json",
    "labkit/_data/instructions/coding-agent.md",
    "labkit/_data/sample_repo/pyproject.toml",
    "labkit/_data/sample_repo/tally/__init__.py",
    "labkit/_data/sample_repo/tests/test_tax.py",
]


def read_pyproject() -> dict:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)")


def requirement_name(requirement: str) -> str:
    match = REQUIREMENT.fullmatch(requirement)
    assert match, f"cannot read the requirement {requirement!r}"
    return canonical(match[1])


def normalized_requirement(requirement: str) -> str:
    """Name, extras and specifier, with spelling differences (case, spaces, order) removed."""
    match = REQUIREMENT.fullmatch(requirement)
    assert match, f"cannot read the requirement {requirement!r}"
    extras = sorted(canonical(e.strip()) for e in (match[2] or "[]")[1:-1].split(",") if e.strip())
    specifiers = ",".join(sorted(re.sub(r"\s+", "", s) for s in match[3].split(",") if s.strip()))
    return canonical(match[1]) + (f"[{','.join(extras)}]" if extras else "") + specifiers


# ---------------------------------------------------------------------------------------------
# The base dependencies cover every third-party import under labkit/


# The notebook front end's own modules: they may import what the [notebooks] extra adds (live.py
# only where a lab lays out a live figure, in an ipywidgets box).
FRONT_END = {
    "labkit/analysis/whatif_ui.py",
    "labkit/analysis/replay_ui.py",
    "labkit/analysis/frontend.py",
    "labkit/analysis/live.py",
}


def third_party_imports(package_dir: Path) -> dict[str, set[str]]:
    """Every top-level module imported under ``package_dir`` that is neither the standard
    library nor labkit itself, with the files importing it (lazy imports included)."""
    found: dict[str, set[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "labkit":
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(package_dir.parent)))
    return found


def undeclared_imports(imports: Iterable[str], dependencies: Iterable[str]) -> dict[str, list[str]]:
    """The imports no declared dependency provides: import name -> the distributions that would."""
    declared = {requirement_name(r) for r in dependencies}
    providers = importlib.metadata.packages_distributions()
    missing = {}
    for name in sorted(imports):
        # A module no installed distribution provides can only be declared under its own name.
        distributions = providers.get(name, [name])
        if not declared & {canonical(d) for d in distributions}:
            missing[name] = sorted(set(distributions))
    return missing


def test_base_dependencies_cover_every_third_party_import() -> None:
    imports = third_party_imports(PACKAGE)
    assert "pandas" in imports and "openai" in imports, "the import scan found what labkit imports"
    everywhere = {name: files - FRONT_END for name, files in imports.items() if files - FRONT_END}
    missing = undeclared_imports(everywhere, read_pyproject()["project"]["dependencies"])
    report = "; ".join(f"{name} ({', '.join(d)}) in {sorted(imports[name])}" for name, d in missing.items())
    assert not missing, f"imported under labkit/ but not in pyproject's [project] dependencies: {report}"


def test_the_front_end_needs_only_the_notebooks_extra() -> None:
    project = read_pyproject()["project"]
    front = {name for name, files in third_party_imports(PACKAGE).items() if files & FRONT_END}
    assert "ipywidgets" in front
    with_notebooks = [*project["dependencies"], *project["optional-dependencies"]["notebooks"]]
    assert undeclared_imports(front, with_notebooks) == {}


def test_the_dependency_check_notices_a_missing_dependency() -> None:
    dependencies = read_pyproject()["project"]["dependencies"]
    without_pandas = [r for r in dependencies if requirement_name(r) != "pandas"]
    everywhere = {n: f - FRONT_END for n, f in third_party_imports(PACKAGE).items() if f - FRONT_END}
    assert undeclared_imports(everywhere, without_pandas) == {"pandas": ["pandas"]}


def test_extras_only_add_to_the_base() -> None:
    project = read_pyproject()["project"]
    base = {requirement_name(r) for r in project["dependencies"]}
    for extra, requirements in project["optional-dependencies"].items():
        names = [requirement_name(r) for r in requirements]
        assert "labkit" not in names, f"[{extra}] pulls in another extra; extras only add tools"
        assert not base & set(names), f"[{extra}] repeats base dependencies: {sorted(base & set(names))}"


# ---------------------------------------------------------------------------------------------
# The wheel ships data/ as labkit/_data, and an installed copy finds it


def test_every_labkit_package_is_listed() -> None:
    setuptools_config = read_pyproject()["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert set(setuptools_config["packages"]) == on_disk | {"labkit._data"}
    assert setuptools_config["package-dir"] == {"labkit._data": "data"}


def build_wheel(out: Path, work: Path) -> Path:
    """Build labkit's wheel from a copy of the sources (a build in the checkout would leave
    build/ behind, whose stale files can end up in later wheels)."""
    source = work / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "labkit", "data"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
    if setuptools_can_build_here():
        command.append("--no-build-isolation")  # no download: the test extra brings setuptools
    subprocess.run([*command, str(source)], check=True, timeout=300)
    (wheel,) = out.glob("labkit-*.whl")
    return wheel


def setuptools_can_build_here() -> bool:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    # From 70.1 setuptools builds wheels by itself (before, it needed the wheel package).
    return tuple(int(p) for p in re.findall(r"\d+", version)[:2]) >= (70, 1)


FIND_DATA = """
import json, labkit, labkit.paths
from labkit.scenarios import load_scenario
from labkit.profiles import load_profile, profile_dirs

data = labkit.paths.default_data_dir()
scenario = load_scenario(SCENARIO, data)
profile = load_profile("production-like", data)
print(json.dumps({
    "labkit": labkit.__file__,
    "data": str(data),
    "builtin": str(labkit.paths.builtin_data_dir()),
    "scenario": scenario.name,
    "steps": len(scenario.steps),
    "repo": str(scenario.repo) if scenario.repo else None,
    "repo_is_dir": bool(scenario.repo and scenario.repo.is_dir()),
    "replicas": profile.engine.replicas,
    "profile_dirs": [str(d) for d in profile_dirs(data)],
}))
"""


def run_installed(site: Path, cwd: Path, scenario: str, data_env: Path | None = None) -> dict:
    """Run FIND_DATA with labkit imported from ``site``, from another working directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("LABKIT_DATA", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    if data_env is not None:
        env["LABKIT_DATA"] = str(data_env)
    code = FIND_DATA.replace("SCENARIO", repr(scenario))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_wheel_ships_the_data_and_an_installed_copy_finds_it(tmp_path: Path) -> None:
    tmp_path = tmp_path.resolve()
    wheel = build_wheel(tmp_path / "dist", tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(WHEEL_DATA) <= names
    shipped = {
        "labkit/_data/" + path.relative_to(DATA).as_posix()
        for path in DATA.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert not shipped - names, f"data/ files missing from the wheel: {sorted(shipped - names)}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    packaged = site / "labkit" / "_data"

    found = run_installed(site, elsewhere, "fix-failing-test")
    assert Path(found["labkit"]).is_relative_to(site), "the unzipped wheel was imported"
    assert Path(found["data"]) == packaged == Path(found["builtin"])
    assert found["scenario"] == "fix-failing-test" and found["steps"] > 0
    assert found["repo"] == str(packaged / "sample_repo") and found["repo_is_dir"]
    assert found["replicas"] == 4

    # $LABKIT_DATA still overrides; the built-in profiles stay reachable from a custom directory.
    custom = tmp_path / "custom"
    (custom / "scenarios").mkdir(parents=True)
    (custom / "scenarios" / "my-scenario.json").write_text(
        json.dumps({"description": "one answer", "user": "Hi.", "steps": [{"text": "Hello."}]})
    )
    found = run_installed(site, elsewhere, "my-scenario", data_env=custom)
    assert Path(found["labkit"]).is_relative_to(site)
    assert Path(found["data"]) == custom and Path(found["builtin"]) == packaged
    assert found["scenario"] == "my-scenario" and found["repo"] is None
    assert found["profile_dirs"] == [str(custom / "profiles"), str(packaged / "profiles")]
    assert found["replicas"] == 4


# ---------------------------------------------------------------------------------------------
# environment.yml (conda, Binder) asks for what pyproject.toml does


def environment_pip_requirements(text: str) -> list[str]:
    """The items of the ``- pip:`` list in an environment.yml (just enough YAML for that file)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"\s*- pip:\s*", line)]
    assert len(starts) == 1, "environment.yml has one '- pip:' list"
    indent = len(lines[starts[0]]) - len(lines[starts[0]].lstrip())
    requirements = []
    for line in lines[starts[0] + 1 :]:
        content = line.split(" #", 1)[0].rstrip()
        if not content.strip() or content.lstrip().startswith("#"):
            continue
        if len(content) - len(content.lstrip()) <= indent:
            break
        item = re.fullmatch(r"\s*-\s+(.*)", content)
        assert item, f"unexpected line in the pip list: {line!r}"
        requirements.append(item[1].strip().strip("\"'"))
    return requirements


def test_environment_yml_pip_list_is_pyproject_base_plus_notebooks() -> None:
    project = read_pyproject()["project"]
    expected = [*project["dependencies"], *project["optional-dependencies"]["notebooks"]]
    listed = environment_pip_requirements(ENVIRONMENT.read_text())
    assert len(listed) == len(set(listed)), "no requirement is listed twice"
    assert sorted(map(normalized_requirement, listed)) == sorted(map(normalized_requirement, expected))


def test_environment_yml_reader_sees_a_drift() -> None:
    text = ENVIRONMENT.read_text()
    assert environment_pip_requirements(text)
    drifted = re.sub(r'"pandas>=[^"]*"', '"pandas>=1"', text)
    assert drifted != text
    project = read_pyproject()["project"]
    expected = [*project["dependencies"], *project["optional-dependencies"]["notebooks"]]
    assert sorted(map(normalized_requirement, environment_pip_requirements(drifted))) != sorted(
        map(normalized_requirement, expected)
    )


def test_environment_yml_has_python_and_pip_and_binder_installs_the_package() -> None:
    text = ENVIRONMENT.read_text()
    assert re.search(r"^\s*- python=3\.11\s*$", text, re.M)
    assert re.search(r"^\s*- pip\s*$", text, re.M)
    script = POSTBUILD.read_text()
    assert script.startswith("#!/bin/bash\n") and "set -euo pipefail" in script
    assert re.search(r"^python -m pip install --no-deps (-e )?\.$", script, re.M)
    assert os.access(POSTBUILD, os.X_OK), "postBuild is executable"


@pytest.mark.parametrize(
    ("requirement", "normalized"),
    [
        ("openai[realtime]>=2", "openai[realtime]>=2"),
        ("Jupyter_Lab >= 4", "jupyter-lab>=4"),
        ("x[b, a]>=1, <3", "x[a,b]<3,>=1"),
    ],
)
def test_requirements_are_compared_by_meaning(requirement: str, normalized: str) -> None:
    assert normalized_requirement(requirement) == normalized
