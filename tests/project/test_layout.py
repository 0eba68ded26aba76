"""tests/ mirrors labkit/: a newcomer who changes ``labkit/server/edge/outbox.py`` finds its tests
in ``tests/server/edge/test_outbox.py``.

Each test module under ``tests/<package>/`` is named for a module or subpackage of
``labkit/<package>/`` (``test_<name>.py``, or ``test_<name>_<aspect>.py`` when one module's tests
are several files: ``test_http_create.py``, ``test_http_stream.py``), or for the package itself
(``tests/cli/test_cli.py`` for ``labkit/cli/__init__.py``); a test module directly in
``tests/`` names a top-level module of labkit (``test_lab.py``). A folder under ``tests/<package>/``
is the tests of its subpackage, by the same rules (``tests/server/ws/`` for ``labkit/server/ws/``).
What belongs to no one module
has a folder beside them: the real clients, the notebooks, the benchmarks, the project's own files.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BESIDE = {"clients", "notebooks", "benchmarks", "project"}


def modules_of(package: Path) -> set[str]:
    """The names a test module may be named for: the package's modules and subpackages."""
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return names


def names_a_module(test_file: Path, modules: set[str]) -> bool:
    stem = test_file.stem.removeprefix("test_")
    return any(stem == m or stem.startswith(f"{m}_") for m in modules)


def misplaced(tests: Path, labkit: Path) -> list[str]:
    """Every folder and test module of ``tests`` that does not mirror ``labkit``, as a sentence."""
    problems = []
    for test_file in sorted(tests.glob("test_*.py")):
        if not names_a_module(test_file, modules_of(labkit)):
            problems.append(f"{test_file.name} names no top-level module of labkit")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if not (folder / "__init__.py").is_file():
            problems.append(f"{folder.name}/ has no __init__.py")
        if folder.name in BESIDE:
            continue
        if not (labkit / folder.name / "__init__.py").is_file():
            problems.append(f"{folder.name}/ is no package of labkit and not one of {sorted(BESIDE)}")
            continue
        problems += unmirrored(folder, labkit / folder.name, folder.name)
    return problems


def unmirrored(tests: Path, package: Path, name: str) -> list[str]:
    """Every test module and folder of ``tests`` (the tests of ``package``, ``name`` from tests/ on)
    that names no module or subpackage of the package, as a sentence."""
    problems = []
    dotted = f"labkit.{name.replace('/', '.')}"
    modules = modules_of(package) | {package.name}  # the package's own __init__
    for test_file in sorted(tests.glob("test_*.py")):
        if not names_a_module(test_file, modules):
            problems.append(f"{name}/{test_file.name} names no module of {dotted}")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if not (folder / "__init__.py").is_file():
            problems.append(f"{name}/{folder.name}/ has no __init__.py")
        if not (package / folder.name / "__init__.py").is_file():
            problems.append(f"{name}/{folder.name}/ is no subpackage of {dotted}")
            continue
        problems += unmirrored(folder, package / folder.name, f"{name}/{folder.name}")
    return problems


def test_every_test_module_sits_where_its_module_does() -> None:
    assert misplaced(REPO / "tests", REPO / "labkit") == []


def test_every_package_of_labkit_has_its_tests() -> None:
    packages = {p.name for p in (REPO / "labkit").iterdir() if (p / "__init__.py").is_file()}
    assert packages <= {p.name for p in (REPO / "tests").iterdir() if p.is_dir()}


def test_a_test_module_out_of_place_is_named(tmp_path: Path) -> None:
    labkit = tmp_path / "labkit"
    (labkit / "server/edge").mkdir(parents=True)
    for path in (
        "__init__.py",
        "lab.py",
        "server/__init__.py",
        "server/edge/__init__.py",
        "server/edge/outbox.py",
    ):
        (labkit / path).write_text("")
    tests = tmp_path / "tests"
    for folder in ("server", "server/edge", "server/misc", "project", "misc"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "__init__.py").write_text("")
    for path in (
        "test_lab.py",
        "test_labs.py",
        "server/test_edge.py",
        "server/test_outbox.py",
        "server/edge/test_outbox.py",
        "server/edge/test_outbox_memory.py",
        "server/edge/test_http.py",
        "project/test_readme.py",
    ):
        (tests / path).write_text("")
    assert misplaced(tests, labkit) == [
        "test_labs.py names no top-level module of labkit",
        "misc/ is no package of labkit and not one of ['benchmarks', 'clients', 'notebooks', 'project']",
        "server/test_outbox.py names no module of labkit.server",
        "server/edge/test_http.py names no module of labkit.server.edge",
        "server/misc/ is no subpackage of labkit.server",
    ]
