"""The design a request or a WebSocket connection asks for, answered as a 400 when it names none.

Shared configuration (``labkit.designs``) raises a plain ``DesignSpecError``; turning it into
the wire's error is the server's work, done here for HTTP, compaction and WebSocket mode alike.
"""

from __future__ import annotations

from labkit.api.errors import invalid_request
from labkit.api.extensions import DESIGN_HEADER
from labkit.designs import Design, DesignSpecError, select_design


def requested_design(spec: str | None, default: Design) -> Design:
    """The design a request or a connection asked for (a name or a composed spec), or the
    transport's default; a bad spec is a 400 naming what is wrong.

    >>> from labkit.designs import SPRINT
    >>> requested_design("naive+turbo", SPRINT)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    labkit.api.errors.APIError: Unknown labkit design part 'turbo' in 'naive+turbo'. ...
    """
    try:
        return select_design(spec, default)
    except DesignSpecError as exc:
        raise invalid_request(str(exc), param=DESIGN_HEADER, code="invalid_value") from None
