"""The declared minimums as pip constraints: ``name==floor`` for every direct dependency of the
package and its test extra, read from pyproject.toml (the one place the floors are written).

    python .ci/floors.py [EXTRA ...]    # prints the constraints; the default extra is "test"

.ci/check-floors installs with these constraints and runs the tests, so a floor the code has
outgrown fails there. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

# name, optional [extras], then the specifiers; markers (after ";") are not used by labkit.
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*)")
FLOOR = re.compile(r">=\s*([0-9][0-9A-Za-z.+!-]*)")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path = PYPROJECT, extras: tuple[str, ...] = ("test",)) -> list[str]:
    """The base dependencies, then each extra's, as written."""
    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    found = list(project["dependencies"])
    for extra in extras:
        found += project["optional-dependencies"][extra]
    return found


def floors(pyproject: Path = PYPROJECT, extras: tuple[str, ...] = ("test",)) -> dict[str, str]:
    """Each direct dependency's declared minimum, by canonical name; every one must declare one."""
    result: dict[str, str] = {}
    for requirement in requirements(pyproject, extras):
        match = REQUIREMENT.fullmatch(requirement)
        if not match:
            raise ValueError(f"cannot read the requirement {requirement!r}")
        name, specifiers = canonical(match[1]), match[2]
        lower = FLOOR.findall(specifiers)
        if len(lower) != 1:
            raise ValueError(f"{requirement!r} must declare exactly one minimum (>=)")
        if result.setdefault(name, lower[0]) != lower[0]:
            raise ValueError(f"{name} has two different minimums: {result[name]} and {lower[0]}")
    return result


def constraints(pyproject: Path = PYPROJECT, extras: tuple[str, ...] = ("test",)) -> str:
    return "".join(f"{name}=={version}\n" for name, version in sorted(floors(pyproject, extras).items()))


if __name__ == "__main__":
    sys.stdout.write(constraints(extras=tuple(sys.argv[1:]) or ("test",)))
