"""Every official-SDK call a notebook makes is made by a test module of the quick run
(``pytest -m "not slow"``), which ``.ci/check-floors`` runs with every dependency at its declared
minimum: so the SDK floor in pyproject.toml is shown to cover what the notebooks call.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]

# A call on the SDK's Responses resources, as the notebooks write them: ``client.responses.create(``,
# ``connection.response.steer(``, ``client.beta.responses.connect(``.
SDK_CALL = re.compile(r"\b((?:beta\.)?responses?(?:\.\w+)+)\(")
SLOW = re.compile(r"^pytestmark = pytest\.mark\.slow", re.M)


def sdk_calls(code: str) -> set[str]:
    """The SDK calls in some code, by their path from the client or connection.

    >>> sorted(sdk_calls("conn.response.steer(previous_response_id=r, input=x)\\nc.beta.responses.connect()"))
    ['beta.responses.connect', 'response.steer']
    """
    return set(SDK_CALL.findall(code))


def notebook_calls(folder: Path) -> dict[str, set[str]]:
    """Each SDK call the notebooks' code cells make, with the notebooks making it."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                for call in sdk_calls(cell.source):
                    found.setdefault(call, set()).add(path.name)
    return found


def quick_run_calls(tests: Path) -> set[str]:
    """The SDK calls made by test modules that are not marked slow (this folder's modules, which
    check the project's files and only name the calls, left out)."""
    calls: set[str] = set()
    for path in tests.rglob("test_*.py"):
        text = path.read_text()
        if path.parent.name != "project" and not SLOW.search(text):
            calls |= sdk_calls(text)
    return calls


def test_the_quick_run_makes_every_sdk_call_the_notebooks_make() -> None:
    wanted = notebook_calls(REPO / "notebooks")
    assert {"response.steer", "response.inject", "responses.compact"} <= set(wanted), wanted
    made = quick_run_calls(REPO / "tests")
    missing = {call: sorted(names) for call, names in wanted.items() if call not in made}
    assert not missing, f"SDK calls of the notebooks that no quick test module makes: {missing}"


def test_a_call_only_a_slow_module_or_this_folder_makes_is_missed(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "test_names.py").write_text("conn.response.inject(x)\n")
    (tmp_path / "test_slow.py").write_text("pytestmark = pytest.mark.slow\nconn.response.steer(x)\n")
    (tmp_path / "test_quick.py").write_text("client.responses.create(model=m)\n")
    assert quick_run_calls(tmp_path) == {"responses.create"}
