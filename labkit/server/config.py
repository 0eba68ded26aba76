"""A server's configuration: one object, set on the app when it is made, read by name.

``labkit serve`` builds it from its flags (the limits' flags from ``ServerLimits`` itself);
a test or a notebook builds it directly. The endpoints read it through ``config_of``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.limits import ServerLimits
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE
from labkit.server.stores.datadir import DB_ENV, default_db

if TYPE_CHECKING:
    from starlette.applications import Starlette


@dataclass
class ServerConfig:
    db: str = field(default_factory=lambda: os.environ.get(DB_ENV) or str(default_db()))
    models: str | None = None
    api_keys: list[str] = field(default_factory=list)
    data_dir: Path = field(default_factory=default_data_dir)
    profile: str = DEFAULT_PROFILE
    design: str | None = None  # the default design for both transports; None: sprint / websocket
    instructor_keys: list[str] = field(default_factory=list)  # may watch every key's traces
    limits: ServerLimits = field(default_factory=ServerLimits)  # for a shared server; each one a flag
    # --workers: the room whose traces every worker shares through the database file.
    trace_room: str | None = None
    # --connection-cache: a learner's connection cache class (labkit.server.ws.learner_cache), loaded
    # once at start; every WebSocket connection of a design with the connection cache asks an
    # instance of it, behind the guard. None: labkit's own.
    connection_cache: type | None = None


def config_of(app: Starlette) -> ServerConfig:
    """The configuration ``create_app`` set on ``app``."""
    config: ServerConfig = app.state.config
    return config
