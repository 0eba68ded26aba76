"""A server limit is one field of ``ServerLimits`` (``labkit.limits``): ``labkit serve``'s flag
is built from it, and the server reads it by name from the one config on its app.

In process: the flags as ``labkit serve`` parses them, into the config ``create_app`` is given;
over loopback, a limit set in that config kept by the real app.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path

import httpx
import pytest

from labkit.cli import Parser, build_parser
from labkit.cli.serve import add_limit_flags, limit_flag, limits_of, server_config
from labkit.limits import ServerLimits, limit_field
from labkit.server.app import create_app
from labkit.server.config import ServerConfig, config_of
from tests.helpers import assert_api_error, served_in_thread

FIELDS = dataclasses.fields(ServerLimits)


def serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def others() -> dict[str, int | float]:
    """A value unlike its default for every field: a count for an int, seconds for a float."""
    kinds = typing.get_type_hints(ServerLimits)
    return {spec.name: 2.5 if kinds[spec.name] is float else 7 + i for i, spec in enumerate(FIELDS)}


def test_every_limit_is_a_flag_of_serve_with_its_default_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert limits_of(serve_args()) == ServerLimits()  # no flag given: every default
    with pytest.raises(SystemExit):
        serve_args("--help")
    usage = " ".join(capsys.readouterr().out.split())
    for spec in FIELDS:
        assert limit_flag(spec.name) in usage
        assert " ".join(spec.metadata["help"].split()) in usage
    # The flags labkit serve has always had, under the same names.
    assert {limit_flag(spec.name) for spec in FIELDS} >= {"--ws-lifetime", "--head-timeout", "--max-traces"}


def test_every_flag_reaches_the_app_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LABKIT_API_KEYS", raising=False)
    values = others()
    argv = [part for name, value in values.items() for part in (limit_flag(name), str(value))]
    app = create_app(server_config(serve_args(*argv)))
    assert config_of(app).limits == ServerLimits(**values)
    assert app.state.key_limiter.max_requests == values["max_requests_per_key"]
    assert app.state.key_limiter.max_connections == values["max_connections_per_key"]


@pytest.mark.parametrize("spec", FIELDS, ids=[spec.name for spec in FIELDS])
def test_a_bad_value_for_a_limit_is_one_line(
    spec: dataclasses.Field[object], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        serve_args(limit_flag(spec.name), "0")
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f"argument {limit_flag(spec.name)}: invalid" in lines[0], lines


@dataclasses.dataclass(frozen=True)
class WithANewLimit(ServerLimits):
    max_widgets_per_key: int | None = limit_field(None, "widgets one key may hold (default: no cap)")
    widget_timeout_s: float = limit_field(3.0, "how long a widget may wait")


def test_a_new_field_is_a_new_flag_that_reaches_the_app(capsys: pytest.CaptureFixture[str]) -> None:
    parser = Parser(prog="labkit serve")
    add_limit_flags(parser, WithANewLimit)
    usage = parser.format_help()
    assert "--max-widgets-per-key N" in usage and "--widget-timeout SECONDS" in usage
    limits = limits_of(parser.parse_args(["--max-widgets-per-key", "4"]), WithANewLimit)
    assert limits == WithANewLimit(max_widgets_per_key=4)  # and the rest at their defaults
    app = create_app(ServerConfig(limits=limits))
    assert typing.cast(WithANewLimit, config_of(app).limits).max_widgets_per_key == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["--widget-timeout", "soon"])
    assert "argument --widget-timeout: invalid value 'soon'" in capsys.readouterr().err


def test_a_limit_that_is_not_a_count_or_seconds_has_no_flag() -> None:
    @dataclasses.dataclass(frozen=True)
    class Named(ServerLimits):
        widget_colour: str = limit_field("red", "a widget's colour")

    with pytest.raises(TypeError, match="widget_colour"):
        add_limit_flags(Parser(prog="labkit serve"), Named)


def test_the_app_keeps_the_limit_its_config_names(tmp_path: Path) -> None:
    limits = ServerLimits(max_body_bytes=1000)
    app = create_app(ServerConfig(db=str(tmp_path / "labkit.db"), profile="local", limits=limits))
    body = {"model": "labkit-spark", "input": "x" * 2000}
    with served_in_thread(app) as url:
        error = assert_api_error(httpx.post(f"{url}v1/responses", json=body, timeout=30), 413)
        assert "1000 bytes" in error["message"]
        small = {"model": "labkit-spark", "input": "Hi.", "store": False}
        assert httpx.post(f"{url}v1/responses", json=small, timeout=30).status_code == 200
