"""The Python examples of the README and of the guides in docs/ run as printed.

They are read the way CI's main-environment check reads them (.ci/check_main_env.py, loaded by
path: it is a script, not a package), so the examples a user can copy are the ones that run.
Only the port of the SDK example, written against `labkit serve`, is the test server's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from labkit.client.launcher import LabkitServer

REPO = Path(__file__).resolve().parents[2]


def check_main_env() -> ModuleType:
    """.ci/check_main_env.py, the script that lists and runs the examples in CI."""
    spec = importlib.util.spec_from_file_location("ci_check_main_env", REPO / ".ci" / "check_main_env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = check_main_env()
EXAMPLES = CHECK.python_examples()


def run(name: str, number: int, block: str, namespace: dict) -> None:
    """Run one example; a failure names the file and the block, not just the exception."""
    try:
        exec(block, namespace)
    except Exception as error:
        raise AssertionError(f"{name}, python block {number}, failed: {error!r}\n{block}") from error


def test_the_examples_are_read_from_the_readme_and_the_guides_in_docs() -> None:
    names = {name for name, _ in EXAMPLES}
    assert {"docs/setups.md", "docs/architecture.md", "docs/measuring.md"} <= names
    assert not names & set(CHECK.FRAGMENTS), "the wire references' fragments are not programs"
    assert CHECK.example_documents()[0] == REPO / "README.md"


def test_no_examples_at_all_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(CHECK, "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# No examples\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=r"README.md and docs/\*.md have no ```python blocks"):
        CHECK.python_examples()


def test_the_readme_is_a_short_front_door_one_click_from_every_guide() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "the README is the learner's front door: move detail to docs/"
    guides = [
        *sorted((REPO / "docs").glob("*.md")),
        REPO / "benchmarks" / "README.md",
        REPO / "notebooks" / "README.md",
    ]
    unlinked = [
        path.relative_to(REPO).as_posix()
        for path in guides
        if f"]({path.relative_to(REPO).as_posix()}" not in readme
    ]
    assert not unlinked, f"the README links no way to {unlinked}"
    notebooks = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert all(f"](notebooks/{notebook.name})" in readme for notebook in notebooks), (
        "the learning path links each notebook"
    )


@pytest.mark.slow  # it runs a rollout against a server
def test_the_sdk_example_runs(server: LabkitServer, capsys) -> None:
    written_for_serve = [
        (name, block) for name, block in EXAMPLES if f'base_url="{CHECK.EXAMPLE_URL}"' in block
    ]
    assert len(written_for_serve) == 1, [name for name, _ in written_for_serve]
    name, snippet = written_for_serve[0]
    run(name, 1, snippet.replace(CHECK.EXAMPLE_URL, server.base_url), {})
    printed = capsys.readouterr().out
    assert "function_call read_file" in printed
    assert "prompt tokens served from cache" in printed


@pytest.mark.slow  # each starts a server of its own
def test_every_other_example_starts_its_own_server_and_runs() -> None:
    others = [(name, block) for name, block in EXAMPLES if CHECK.EXAMPLE_URL not in block]
    assert others, "the guides show how to start a server from Python"
    for number, (name, block) in enumerate(others, 1):
        assert "LabkitServer()" in block, f"{name}, python block {number}: neither `labkit serve` nor its own"
        run(name, number, block, {"__name__": "__main__"})
