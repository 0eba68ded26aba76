"""The system timer's resolution while a server runs: 1 ms on Windows, as every OS else has.

Windows wakes sleeping threads on the system timer's tick, every 15.6 ms by default, so an
event loop's 4 ms sleep takes about 16 ms. ``timeBeginPeriod(1)`` asks for 1 ms ticks for as
long as the process holds the request (``timeEndPeriod(1)`` gives it back; Windows drops it
when the process exits anyway). Elsewhere both calls do nothing. The server's lifespan holds
the request, so single- and multi-worker servers both have it; ``labkit.engine.timing`` then
keeps each modeled delay exact where the request is refused.

>>> with fine_system_timer() as granted:
...     granted in (True, False)
True
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

PERIOD_MS = 1
_TIMERR_NOERROR = 0


def _winmm() -> Any | None:
    """Windows' multimedia timer library, or None on every other OS."""
    if os.name != "nt":
        return None
    import ctypes  # windll exists on Windows only

    return ctypes.windll.winmm  # type: ignore[attr-defined]


def raise_resolution(winmm: Any | None = None) -> bool:
    """Ask for 1 ms timer ticks; True if granted (always False off Windows).

    >>> class Winmm:  # what ctypes.windll.winmm answers where Windows grants it
    ...     def timeBeginPeriod(self, period_ms: int) -> int:
    ...         return 0
    >>> raise_resolution(Winmm())
    True
    """
    winmm = winmm if winmm is not None else _winmm()
    if winmm is None:
        return False
    return bool(winmm.timeBeginPeriod(PERIOD_MS) == _TIMERR_NOERROR)


def restore_resolution(winmm: Any | None = None) -> None:
    """Give back the request ``raise_resolution`` made (call once per granted request)."""
    winmm = winmm if winmm is not None else _winmm()
    if winmm is not None:
        winmm.timeEndPeriod(PERIOD_MS)


@contextlib.contextmanager
def fine_system_timer(winmm: Any | None = None) -> Iterator[bool]:
    """1 ms timer ticks inside the block where the OS grants them; yields whether it did."""
    granted = raise_resolution(winmm)
    try:
        yield granted
    finally:
        if granted:
            restore_resolution(winmm)
