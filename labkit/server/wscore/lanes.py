"""A WebSocket lane's name: ``stream_id``.

A ``stream_id`` names a lane; responses on one lane run in order, lanes run concurrently
(``labkit.server.wscore.connection`` holds the rules). Without ``stream_id`` every create goes to
the default lane.
"""

from __future__ import annotations

import re
from typing import Any

from labkit.api.errors import invalid_request

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def check_stream_id(stream_id: Any) -> None:
    """Refuse a ``stream_id`` that is not a lane's name (``None`` is the default lane).

    >>> check_stream_id("lane-1"), check_stream_id(None)
    (None, None)
    """
    if stream_id is not None and not (isinstance(stream_id, str) and STREAM_ID.fullmatch(stream_id)):
        raise invalid_request(
            "Invalid 'stream_id': use 1 to 256 characters from A-Z, a-z, 0-9, '_', '.', '-'.",
            param="stream_id",
            code="invalid_stream_id",
        )
