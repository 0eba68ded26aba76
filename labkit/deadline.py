"""A deadline for code that may never return: a learner's method in the server, or a learner's
function in a notebook's kernel.

On POSIX, in the main thread, a SIGALRM timer interrupts even a pure-Python endless loop: the
handler raises ``raising`` where the code is. Elsewhere (Windows, another thread) there is no
such timer; ``interrupts_here()`` says so, and the caller chooses what to do instead.

    >>> import time
    >>> class TooSlow(BaseException): pass
    >>> try:
    ...     with alarm(0.05, TooSlow):
    ...         while True: time.sleep(0.01)
    ... except TooSlow:
    ...     print("stopped")
    stopped
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


def interrupts_here() -> bool:
    """Whether ``alarm`` can stop code here: SIGALRM exists (POSIX) and this is the main thread."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def alarm(seconds: float, raising: type[BaseException]) -> Iterator[None]:
    """Raise ``raising`` inside the block once ``seconds`` have passed (see ``interrupts_here``).

    ``raising`` should be a BaseException, so that the code's own ``except Exception`` cannot
    swallow it. The timer is cancelled and the previous handler restored however the block ends.
    """

    def stop(signum: int, frame: FrameType | None) -> None:
        raise raising

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
