"""Where the server keeps its database by default: each OS's place for an application's data.

- Windows: ``%LOCALAPPDATA%\\labkit`` (else ``~/AppData/Local/labkit``);
- macOS: ``~/Library/Application Support/labkit``;
- Linux and the rest: ``$XDG_DATA_HOME/labkit`` (else ``~/.local/share/labkit``).

``$LABKIT_DB`` (``DB_ENV``) names another file on every OS.

>>> default_db(platform="linux", env={"XDG_DATA_HOME": "/data"}).as_posix()
'/data/labkit/responses.sqlite3'
>>> default_db(platform="linux", env={"LABKIT_DB": "/tmp/lab.sqlite3"}).as_posix()
'/tmp/lab.sqlite3'
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

DB_ENV = "LABKIT_DB"
APP_DIR = "labkit"
DB_FILE = "responses.sqlite3"


def _is_windows(platform: str) -> bool:
    return platform.startswith(("win", "cygwin"))


def _path_kind(platform: str) -> type[PurePath]:
    """Real paths for this OS; pure paths of another, so each OS's answer can be computed anywhere."""
    if platform == sys.platform:
        return Path
    return PureWindowsPath if _is_windows(platform) else PurePosixPath


def data_home(
    platform: str | None = None, env: Mapping[str, str] | None = None, home: PurePath | None = None
) -> PurePath:
    """The OS's directory for an application's data (not yet labkit's folder in it).

    ``platform`` is a ``sys.platform`` value; ``env`` and ``home`` default to this process's.

    >>> data_home(platform="darwin", env={}, home=PurePosixPath("/Users/ada")).as_posix()
    '/Users/ada/Library/Application Support'
    >>> str(data_home(platform="win32", env={"LOCALAPPDATA": r"C:\\Users\\ada\\AppData\\Local"}))
    'C:\\\\Users\\\\ada\\\\AppData\\\\Local'
    """
    platform = sys.platform if platform is None else platform
    env = os.environ if env is None else env
    windows = _is_windows(platform)
    kind = _path_kind(platform)
    if windows and env.get("LOCALAPPDATA"):
        return kind(env["LOCALAPPDATA"])
    if not windows and platform != "darwin" and env.get("XDG_DATA_HOME"):
        return kind(env["XDG_DATA_HOME"])
    base = kind(home) if home is not None else kind(Path.home())
    if windows:
        return base / "AppData" / "Local"
    if platform == "darwin":
        return base / "Library" / "Application Support"
    return base / ".local" / "share"


def default_db(
    platform: str | None = None, env: Mapping[str, str] | None = None, home: PurePath | None = None
) -> PurePath:
    """The database file: ``$LABKIT_DB`` if set, else ``responses.sqlite3`` in labkit's data folder.

    A ``Path`` for this OS; for another ``platform``, that OS's pure path.

    >>> default_db(platform="win32", env={}, home=PureWindowsPath(r"C:\\Users\\ada")).as_posix()
    'C:/Users/ada/AppData/Local/labkit/responses.sqlite3'
    """
    platform = sys.platform if platform is None else platform
    env = os.environ if env is None else env
    if env.get(DB_ENV):
        return _path_kind(platform)(env[DB_ENV])
    return data_home(platform, env, home) / APP_DIR / DB_FILE
