"""Argument types and the checks each command runs before it starts a server.

A mistake found here is a ``CommandError`` (or argparse's own error, from a type): one line on
stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import sqlite3
import sys
import tomllib
from pathlib import Path
from typing import Any

from labkit.designs import DesignSpecError, compose
from labkit.engine.catalogue import BUILTIN_MODELS, MODELS_ENV, load_catalogue
from labkit.profiles import known_profiles, load_profile
from labkit.scenarios import SYNTHETIC, SYNTHETIC_DEFAULTS, ScenarioNotFound, load_scenario


class CommandError(Exception):
    """A mistake in a command's arguments, found before anything starts: one line, then exit."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


# Argument types: their ArgumentTypeError messages become "argument --X: MESSAGE".


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port '{text}': use 0 to 65535, where 0 picks a free port")
    return port


def _positive(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def positive_number(text: str) -> float:
    value = _positive(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid value '{text}': use a positive number")
    return value


def positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count '{text}': use a whole number, 1 or more")
    return value


def speeds(text: str) -> list[float]:
    values = [_positive(part) for part in text.split(",")]
    bad = [part for part, value in zip(text.split(","), values, strict=True) if value is None]
    if bad:
        raise argparse.ArgumentTypeError(
            f"invalid decode speed '{bad[0].strip()}': decode speeds must be positive numbers "
            "in tokens/s, comma-separated, e.g. 65,1000,4000"
        )
    return [v for v in values if v is not None]


def design_spec(text: str) -> str:
    """A design's name or composed spec, as its canonical name.

    >>> design_spec("naive+fast_classifiers+render_cache")
    'naive+render_cache+fast_classifiers'
    """
    try:
        return compose(text.strip()).name
    except DesignSpecError as exc:  # argparse turns it into one line and exit 2
        raise argparse.ArgumentTypeError(str(exc)) from None


def design_names(text: str) -> list[str]:
    return [design_spec(name) for name in text.split(",")]


# Checks that need files: run by each command before it starts a server.


def check_profile(name: str, data_dir: Path) -> None:
    names = known_profiles(data_dir)
    known = ", ".join(names)
    if Path(name).suffix == ".toml":  # a path, as load_profile reads it
        if not Path(name).is_file():
            raise CommandError(
                f"--profile file '{name}' does not exist; name a known profile ({known}) or a TOML file"
            )
    elif name not in names:
        raise CommandError(f"unknown profile '{name}' for --profile; known profiles: {known}")
    try:
        load_profile(name, data_dir)
    except (ValueError, OSError) as e:  # TOMLDecodeError is a ValueError
        raise CommandError(f"--profile '{name}' is not a valid profile: {e}") from None


def _builtin_models() -> str:
    with BUILTIN_MODELS.open("rb") as f:
        return ", ".join(sorted(tomllib.load(f)["models"]))


def check_models(path_text: str | None) -> None:
    """The --models file (or $LABKIT_MODELS), read here so a bad one is one line, not a
    traceback from the server's lifespan."""
    source = "--models"
    if not path_text:
        path_text, source = os.environ.get(MODELS_ENV), f"${MODELS_ENV}"
    if not path_text:
        return
    path, builtin = Path(path_text), _builtin_models()
    where = f"{source} file '{path_text}'"
    shape = "[models.NAME] tables, each with decode_tps and prefill_tps in tokens/s"
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise CommandError(f"{where} {what}; pass a TOML file of {shape}; built-in models: {builtin}")
    try:
        with path.open("rb") as f:
            tables: Any = tomllib.load(f).get("models")
    except OSError as e:
        raise CommandError(f"{where} cannot be read: {e.strerror}") from None
    except ValueError as e:  # TOMLDecodeError, or bytes that are not UTF-8
        raise CommandError(f"{where} is not valid TOML: {e}") from None
    if not isinstance(tables, dict) or not tables:
        raise CommandError(f"{where} defines no models; expected {shape}; built-in models: {builtin}")
    for name, fields in tables.items():
        if not isinstance(fields, dict):
            raise CommandError(f"{where}: 'models.{name}' must be a table like [models.{name}]")
        for key in ("decode_tps", "prefill_tps"):
            value = fields.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise CommandError(f"{where}: model '{name}' has {key} = {value!r}; use a positive number")
    try:
        load_catalogue(path)
    except ValueError as e:  # a new model lacking a speed: only built-in models may omit fields
        raise CommandError(
            f"{where}: {e} (built-in models, which may override one field: {builtin})"
        ) from None


def check_db(db: str) -> None:
    """Open the SQLite file as the server will (WAL, its tables), to report a bad --db here: a
    folder, a path under a file, a file that is not SQLite, one that cannot be written. A file
    another process has locked is not a mistake: the server serves, and waits for it."""
    if db == ":memory:":
        return
    path, where = Path(db), f"--db '{db}'"
    if path.is_dir():
        raise CommandError(f"{where} is a directory; pass the path of a SQLite file")
    blocker = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if blocker is not None:
        raise CommandError(
            f"{where} cannot be created: '{blocker}' is a file, not a folder; pass another path"
        )
    from labkit.server.edge.workers import prepare_database
    from labkit.server.stores.database import LOCKED  # the server's own modules: only now, when serving

    try:
        prepare_database(db)
    except OSError as e:
        raise CommandError(
            f"{where} cannot be created: {e.strerror or e}; pass another path with --db"
        ) from None
    except sqlite3.Error as e:
        reason = str(e)
        if reason in LOCKED:
            return
        if "not a database" in reason:
            what = "is not a SQLite database"
        elif "readonly" in reason or "read-only" in reason:
            what = "cannot be written"
        else:
            what = "cannot be opened or written"
        raise CommandError(f"{where} {what} ({reason}); pass another path with --db") from None


def check_scenario(name: str, data_dir: Path) -> None:
    example = f"{SYNTHETIC}:" + ",".join(f"{k}={v}" for k, v in SYNTHETIC_DEFAULTS.items())
    try:
        load_scenario(name, data_dir)
    except ScenarioNotFound as e:
        if name == SYNTHETIC or name.startswith(f"{SYNTHETIC}:"):
            raise CommandError(
                f"--scenario '{name}': {e}; each takes a whole number, "
                f"e.g. {SYNTHETIC}:turns=20,tool_tokens=1000"
            ) from None
        known = ", ".join(sorted(p.stem for p in (data_dir / "scenarios").glob("*.json"))) or "none"
        raise CommandError(
            f"unknown scenario '{name}' for --scenario; known scenarios: {known}, "
            f"or {example} (a generated one; give any of its parameters)"
        ) from None
    except ValueError as e:  # synthetic() refusing a size, or a scenario file that is not JSON
        raise CommandError(f"--scenario '{name}': {e}") from None
    except (KeyError, OSError) as e:
        raise CommandError(
            f"--scenario '{name}': its file cannot be used ({type(e).__name__}: {e})"
        ) from None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _printable_ascii(keys: list[str], what: str) -> None:
    # A bearer key is printable ASCII: another one could never be sent, and the server would refuse it.
    if any(not (key.isascii() and key.isprintable()) for key in keys):
        raise CommandError(f"{what} must be printable ASCII")


def check_keys(
    host: str, keys: list[str], *, allow_no_keys: bool, instructor_keys: list[str] | None = None
) -> None:
    """A server others can reach needs keys: without them anyone on the network could use it,
    and every request would share one anonymous owner (and so see each other's responses)."""
    _printable_ascii(keys, "an API key (--api-key or $LABKIT_API_KEYS)")
    instructors = "an instructor key (--instructor-key or $LABKIT_INSTRUCTOR_KEYS)"
    _printable_ascii(instructor_keys or [], instructors)
    if keys or _is_loopback(host):
        return
    if not allow_no_keys:
        raise CommandError(
            f"refusing to serve on --host {host} without API keys: anyone who can reach it could "
            "use it and read every response; pass --api-key KEY (or set LABKIT_API_KEYS), "
            "or --allow-no-keys to serve it open anyway"
        )
    print(
        f"labkit: warning: serving on {host} with no API keys (--allow-no-keys); anyone who can "
        "reach this port can use the server and read every response.",
        file=sys.stderr,
    )
