"""Command-line mistakes end in one line on stderr and a non-zero exit, never a traceback.

Each case runs ``python -m labkit`` as a subprocess; none of them gets as far as serving.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from labkit import __version__
from labkit.designs import DESIGNS
from labkit.paths import default_data_dir
from labkit.profiles import known_profiles
from tests.helpers import labkit, one_line_error

pytestmark = pytest.mark.slow  # the command line in subprocesses


def test_serve_on_a_port_in_use(busy_port: int, tmp_path: Path) -> None:
    result = labkit("serve", "--port", str(busy_port), "--db", str(tmp_path / "r.sqlite3"))
    line = one_line_error(result, str(busy_port), "127.0.0.1", "already in use", "--port")
    assert line.startswith("labkit serve: error:")


def test_serve_on_an_address_not_of_this_machine(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("10.255.255.1", 0))
        except OSError:
            pass
        else:  # the address is this machine's, or non-local binds are allowed: labkit would serve
            pytest.skip("10.255.255.1 can be bound here")
    # With a key: a non-loopback address without one is refused before any bind.
    db = str(tmp_path / "r.sqlite3")
    result = labkit("serve", "--host", "10.255.255.1", "--port", "0", "--db", db, "--api-key", "sk-room")
    one_line_error(result, "10.255.255.1", "--host")


@pytest.mark.parametrize("port", ["abc", "70000", "-1"])
def test_serve_invalid_port(port: str) -> None:
    result = labkit("serve", "--port", port)
    assert result.returncode == 2
    one_line_error(result, "--port", f"'{port}'", "0 to 65535", "labkit serve --help")


def test_serve_unknown_profile() -> None:
    result = labkit("serve", "--profile", "nope")
    one_line_error(result, "'nope'", "--profile", *known_profiles(default_data_dir()))


def test_serve_models_file_missing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    result = labkit("serve", "--models", str(missing))
    one_line_error(result, "--models", str(missing), "does not exist", "labkit-spark")


def test_serve_models_file_not_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.broken\n")
    one_line_error(labkit("serve", "--models", str(bad)), "--models", str(bad), "not valid TOML")


def test_serve_models_file_missing_a_speed(tmp_path: Path) -> None:
    bad = tmp_path / "half.toml"
    bad.write_text("[models.my-model]\ndecode_tps = 300\n")
    one_line_error(labkit("serve", "--models", str(bad)), "my-model", "prefill_tps", "labkit-spark")


def test_serve_models_from_the_environment(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    result = labkit("serve", env={"LABKIT_MODELS": str(missing)})
    one_line_error(result, "$LABKIT_MODELS", str(missing), "does not exist")


@pytest.mark.parametrize("tps", ["abc", "0", "-5", "65,,1000"])
def test_compare_bad_speeds(tps: str) -> None:
    result = labkit("compare", "--tps", tps)
    assert result.returncode == 2
    one_line_error(result, "--tps", "positive numbers")


def test_compare_unknown_scenario() -> None:
    result = labkit("compare", "--scenario", "nope")
    one_line_error(result, "'nope'", "--scenario", "fix-failing-test", "synthetic:")


def test_compare_bad_synthetic_parameter() -> None:
    result = labkit("compare", "--scenario", "synthetic:turns=x")
    one_line_error(result, "turns=x", "whole number")


def test_compare_unknown_design() -> None:
    result = labkit("compare", "--designs", "naive,bogus")
    one_line_error(result, "--designs", "'bogus'", *DESIGNS)


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--design", "naive+bogus"],
        ["compare", "--designs", "naive,naive+bogus"],
        ["compare", "--designs", "sprint+bogus,naive"],
    ],
)
def test_unknown_design_part(args: list[str]) -> None:
    result = labkit(*args)
    assert result.returncode == 2
    one_line_error(result, args[1], "'bogus'", "'naive+bogus'" if "naive+" in args[2] else "'sprint+bogus'")


@pytest.mark.parametrize(
    ("spec", "fact"),
    [("naive++render_cache", "Empty"), ("sprint+render_cache", "changes nothing")],
)
def test_bad_composed_design(spec: str, fact: str) -> None:
    result = labkit("serve", "--design", spec)
    assert result.returncode == 2
    one_line_error(result, "--design", fact, spec)


def test_compare_unknown_profile() -> None:
    result = labkit("compare", "--profile", "nope")
    one_line_error(result, "'nope'", "--profile", *known_profiles(default_data_dir()))


@pytest.mark.parametrize(
    ("args", "facts"),
    [
        (["serve", "--bogus"], ["unrecognized arguments: --bogus", "labkit serve --help"]),
        (["serve", "--port"], ["--port", "expected one argument"]),
        (["serve", "--log-level", "loud"], ["--log-level", "'loud'", "debug"]),
        (["compare", "--repeat", "0"], ["--repeat", "'0'"]),
        ([], ["serve", "compare", "labkit --help"]),
        (["bogus"], ["'bogus'", "serve", "compare"]),
    ],
)
def test_argparse_errors_are_one_line(args: list[str], facts: list[str]) -> None:
    result = labkit(*args)
    assert result.returncode == 2
    one_line_error(result, *facts)


def test_version() -> None:
    result = labkit("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"labkit {__version__}"


def test_help_shows_defaults_once_in_plain_text() -> None:
    serve_help, compare_help, top_help = (labkit(*a, "--help").stdout for a in (["serve"], ["compare"], []))
    # Help wraps lines; compare with whitespace collapsed.
    serve_help, compare_help, top_help = (" ".join(h.split()) for h in (serve_help, compare_help, top_help))
    assert "(default: 127.0.0.1)" in serve_help and "(default: 8765)" in serve_help
    assert "(default: 65,1000,4000)" in compare_help and "(default: 3)" in compare_help
    for text in (serve_help, compare_help, top_help):
        assert "``" not in text and "default: None" not in text
        assert text.count("(default") == text.count("(default:")  # no "(default 3600)" beside it
