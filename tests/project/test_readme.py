"""The README's SDK snippet runs as printed (only the port is the test server's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.client.launcher import LabkitServer

pytestmark = pytest.mark.slow  # the README's examples run

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_sdk_snippet_runs(server: LabkitServer, capsys) -> None:
    snippet = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    assert 'base_url="http://127.0.0.1:8765/v1"' in snippet
    exec(snippet.replace("http://127.0.0.1:8765/v1", server.base_url), {})
    printed = capsys.readouterr().out
    assert "function_call read_file" in printed
    assert "prompt tokens served from cache" in printed


def test_readme_python_snippets_that_start_their_own_server_run() -> None:
    snippets = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[1:]
    assert snippets, "the README shows how to start a server from Python"
    for snippet in snippets:
        assert "LabkitServer()" in snippet
        exec(snippet, {})
