"""A checkout made as Git for Windows makes it (``core.autocrlf=true``) still serves.

The clone is of this repository's committed HEAD; the server runs from the clone's
own code and data, so the tokenizer file it loads is the one that checkout wrote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "labkit/text/cl100k_base.tiktoken",
    "labkit/engine/models.toml",
    "data/profiles/production-like.toml",
    "data/scenarios/fix-failing-test.json",
    "data/sample_repo/tally/invoice.py",
]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout"
)


@pytest.fixture(scope="module")
def crlf_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clone = tmp_path_factory.mktemp("crlf") / "labkit"
    subprocess.run(
        ["git", "-c", "core.autocrlf=true", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
        check=True,
        capture_output=True,
    )
    return clone


def test_the_clone_rewrote_text_files(crlf_clone: Path) -> None:
    # The setting took effect: ordinary text (this very file) now ends its lines with CRLF.
    assert b"\r\n" in (crlf_clone / "tests" / "project" / "test_line_endings.py").read_bytes()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_data_stays_byte_exact(crlf_clone: Path, name: str) -> None:
    assert (crlf_clone / name).read_bytes() == (ROOT / name).read_bytes()


def test_the_clone_serves_a_response(crlf_clone: Path, tmp_path: Path) -> None:
    # The clone's own code, from its own folder (`python -m` puts the working folder first).
    env = {**os.environ, "PYTHONPATH": str(crlf_clone), "LABKIT_DATA": str(crlf_clone / "data")}
    where = subprocess.run(
        [sys.executable, "-c", "import labkit.text.tokenizer as t; print(t.RANKS_FILE)"],
        cwd=crlf_clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(crlf_clone)
    cmd = [sys.executable, "-m", "labkit", "serve", "--port", "0", "--profile", "local"]
    cmd += ["--db", str(tmp_path / "responses.sqlite3")]
    server = subprocess.Popen(
        cmd, cwd=crlf_clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        assert ready.startswith("labkit: serving on "), ready
        base_url = ready.split()[-1]
        answer = httpx.post(
            f"{base_url}/responses",
            json={"model": "labkit-spark", "input": "Say hello."},
            headers={"Authorization": "Bearer sk-local"},
            timeout=30,
        )
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"
