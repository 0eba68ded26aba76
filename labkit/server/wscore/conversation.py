"""What a finished response leaves for the next on its connection: the connection cache's entry.

Plain data: the core (``labkit.server.wscore.connection``) keeps it and hands it on, and the
pipeline's turn (``labkit.server.stages.response_run.ResponseRun.left_behind``) makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.engine.catalogue import ModelSpec
from labkit.engine.inference import Replica
from labkit.engine.render import PrefixHasher, TokenBuffer


@dataclass
class Conversation:
    """The state of the most recent response: what a connection cache keeps (its rendering's
    rules: ``labkit.server.stages.render_cache``)."""

    response: dict[str, Any]
    items: list[dict[str, Any]]
    buffer: TokenBuffer  # rendered tokens; its system digest names the instructions and tools
    model: ModelSpec
    replica: Replica
    hasher: PrefixHasher | None = None  # the render cache's running digest over ``items``
