"""Where the server keeps its database on each OS, and ``LABKIT_DB`` overriding it."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import pytest

from labkit.server import app as app_module
from labkit.server.stores.datadir import data_home, default_db

# ---------------------------------------------------------------- where the database lives


def test_windows_keeps_it_in_local_app_data() -> None:
    env = {"LOCALAPPDATA": r"D:\Profiles\ada\AppData\Local", "XDG_DATA_HOME": "/ignored"}
    assert default_db(platform="win32", env=env) == PureWindowsPath(
        r"D:\Profiles\ada\AppData\Local\labkit\responses.sqlite3"
    )
    home = PureWindowsPath(r"C:\Users\ada")
    assert default_db(platform="win32", env={}, home=home) == PureWindowsPath(
        r"C:\Users\ada\AppData\Local\labkit\responses.sqlite3"
    )


def test_macos_keeps_it_in_application_support() -> None:
    home = PurePosixPath("/Users/ada")
    expected = PurePosixPath("/Users/ada/Library/Application Support/labkit/responses.sqlite3")
    assert default_db(platform="darwin", env={}, home=home) == expected
    # XDG is not a macOS convention
    assert default_db(platform="darwin", env={"XDG_DATA_HOME": "/x"}, home=home) == expected


def test_linux_follows_xdg() -> None:
    home = PurePosixPath("/home/ada")
    assert default_db(platform="linux", env={}, home=home).as_posix() == (
        "/home/ada/.local/share/labkit/responses.sqlite3"
    )
    assert default_db(platform="linux", env={"XDG_DATA_HOME": "/data"}, home=home).as_posix() == (
        "/data/labkit/responses.sqlite3"
    )
    assert data_home(platform="freebsd14", env={}, home=home).as_posix() == "/home/ada/.local/share"


@pytest.mark.parametrize("platform", ["win32", "darwin", "linux"])
def test_labkit_db_overrides_the_place_on_every_os(platform: str) -> None:
    env = {"LABKIT_DB": "lab.sqlite3", "LOCALAPPDATA": "x"}
    assert default_db(platform=platform, env=env).name == "lab.sqlite3"


def test_the_server_config_uses_this_os_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv("LABKIT_DB", raising=False)
    assert app_module.ServerConfig().db == str(default_db())
    monkeypatch.setenv("LABKIT_DB", str(tmp_path / "mine.sqlite3"))
    assert app_module.ServerConfig().db == str(tmp_path / "mine.sqlite3")
