"""``labkit doctor`` passes here, and each check that fails says FAIL, how to fix it, and exits 1.

Failures are simulated: a corrupt tokenizer file, a module that cannot be imported, an old
Python, a taken port, a server that does not start.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli import doctor, main

pytestmark = pytest.mark.slow  # the command line in subprocesses

CHECK_NAMES = ["python", "install", "tokenizer", "notebooks", "port", "timer", "cpu", "smoke"]


def run_doctor(*args: str) -> int:
    """``labkit doctor ARGS`` in this process: its exit status."""
    try:
        main(["doctor", *args])
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def lines_of(out: str) -> dict[str, list[str]]:
    """Each check's line and its fix line (if any), by the check's name."""
    found: dict[str, list[str]] = {}
    name = ""
    for line in out.splitlines():
        words = line.split()
        if words[:1] and words[0] in (doctor.OK, doctor.WARN, doctor.FAIL):
            name = words[1]
            found[name] = [line]
        elif line.startswith("      fix: "):
            found[name].append(line)
    return found


def failed(out: str, name: str, *facts: str) -> str:
    """The fix line of a check that failed, checked to name the facts."""
    lines = lines_of(out)[name]
    assert lines[0].startswith("FAIL "), lines
    assert len(lines) == 2 and lines[1].strip() != "fix:", lines
    for fact in facts:
        assert fact in "\n".join(lines), (fact, lines)
    return lines[1]


def test_doctor_passes_here(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_doctor() == 0
    out = capsys.readouterr().out
    found = lines_of(out)
    assert list(found) == CHECK_NAMES
    for name in ("python", "install", "tokenizer", "notebooks", "smoke"):
        assert found[name][0].startswith("ok "), found[name]
    assert "turns over websocket" in found["smoke"][0]
    assert "ms per 1k tokens" in found["cpu"][0] and "reference machine" in found["cpu"][0]
    assert out.splitlines()[-1].startswith("labkit doctor: 8 checks")


def test_skip_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_doctor("--skip-smoke") == 0
    assert list(lines_of(capsys.readouterr().out)) == CHECK_NAMES[:-1]


def test_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "doctor", "--help"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and "--skip-smoke" in result.stdout


def test_corrupt_tokenizer_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from labkit.text import tokenizer

    corrupt = tmp_path / "cl100k_base.tiktoken"
    corrupt.write_bytes(tokenizer.RANKS_FILE.read_bytes()[:-100])
    monkeypatch.setattr(tokenizer, "RANKS_FILE", corrupt)
    assert run_doctor("--skip-smoke") == 1
    fix = failed(capsys.readouterr().out, "tokenizer", "corrupt")
    assert "reinstall" in fix


def test_missing_notebook_module() -> None:
    # A fresh interpreter, so the module was never imported: it stands for one not installed.
    code = "import sys; sys.modules['anywidget'] = None; from labkit.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code, "doctor", "--skip-smoke"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result
    assert "Traceback" not in result.stdout + result.stderr
    fix = failed(result.stdout, "notebooks", "anywidget")
    assert 'pip install -e ".[notebooks]"' in fix


def test_old_ipykernel(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = doctor._version_of
    monkeypatch.setattr(doctor, "_version_of", lambda name: "6.29.5" if name == "ipykernel" else real(name))
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_notebooks])
    assert run_doctor() == 1
    failed(capsys.readouterr().out, "notebooks", "ipykernel 6.29.5", ">=7", 'pip install -e ".[notebooks]"')


def test_missing_dependency(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = doctor._version_of
    monkeypatch.setattr(doctor, "_version_of", lambda name: None if name == "plotly" else real(name))
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_install])
    assert run_doctor() == 1
    fix = failed(capsys.readouterr().out, "install", "plotly missing")
    assert 'pip install "plotly>=6"' in fix


def test_old_python(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(doctor.platform, "python_version", lambda: "3.10.12")
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_python])
    assert run_doctor() == 1
    failed(capsys.readouterr().out, "python", "3.10.12", ">=3.11")


def test_default_port_taken_is_a_warning(
    busy_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "DEFAULT_PORT", busy_port)
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_port])
    assert run_doctor() == 0  # notebooks pick a free port: a taken default does not stop them
    lines = lines_of(capsys.readouterr().out)["port"]
    assert lines[0].startswith("warn ") and str(busy_port) in lines[0] and "already in use" in lines[0]
    assert "--port 0" in lines[1]


def test_no_free_port(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("203.0.113.7", 0))
        except OSError:
            pass
        else:  # non-local binds are allowed here: the port check would pass
            pytest.skip("203.0.113.7 can be bound here")
    monkeypatch.setattr(doctor, "LOOPBACK", "203.0.113.7")  # a documentation address: never this machine's
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_port])
    assert run_doctor() == 1
    failed(capsys.readouterr().out, "port", "203.0.113.7", "127.0.0.1")


def test_coarse_timer_is_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "timer_step", lambda: (0.0156, False))
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_timer])
    assert run_doctor() == 0
    lines = lines_of(capsys.readouterr().out)["timer"]
    assert lines[0].startswith("warn ") and "15.60 ms" in lines[0]
    assert "precise sleep" in lines[1]


def test_server_that_does_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "SMOKE_ARGS", ["--profile", "nope"])
    monkeypatch.setattr(doctor, "CHECKS", [doctor.check_smoke])
    assert run_doctor() == 1
    fix = failed(capsys.readouterr().out, "smoke", "did not start", "nope")
    assert "labkit serve --profile nope" in fix


@pytest.mark.parametrize(("ms", "effect"), [(0.43, "about the same"), (1.2, "larger"), (0.2, "smaller")])
def test_cpu_compared_with_the_reference(ms: float, effect: str) -> None:
    meaning = doctor.compare_cpu(ms)
    assert meaning.startswith(f"about {ms / doctor.REFERENCE_MS_PER_1K:.1f}× the reference machine's")
    assert meaning.endswith(f"share in the notebooks will be {effect}")
