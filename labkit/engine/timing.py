"""Sleeps that keep their length on an event loop whose timer is coarse.

Every delay the server models (a network hop, a classifier, the billing service, the decode
clock's next token) is an ``await`` on the event loop. On Linux and macOS the loop wakes within
about 0.1 ms of a timer's deadline. On Windows it wakes on the system timer's tick, every
15.6 ms unless a program asks for a finer one: a 4 ms hop and a 12 ms hop would both take
about 16 ms, and a lesson that shortens one would show nothing.

:func:`sleep` measures the running loop's timer once (:func:`calibrate`: a few 1 ms sleeps,
started by the loop's first sleep, which is plain meanwhile; the server measures at start-up)
and, where it is coarse, sleeps with the loop's timer only for the part of the delay that is
longer than one tick, then yields to the loop (``asyncio.sleep(0)``, other tasks run) until
the deadline has passed by ``time.perf_counter()``. Where the timer is fine, it is one plain
``asyncio.sleep``: nothing spins.

>>> import asyncio
>>> async def hop() -> float:
...     start = time.perf_counter()
...     await sleep(0.004)
...     return time.perf_counter() - start
>>> asyncio.run(hop()) >= 0.004
True
"""

from __future__ import annotations

import asyncio
import statistics
import time
import weakref
from collections.abc import Callable

# A loop whose 1 ms sleep takes longer than this has a coarse timer (Linux: about 1.1 ms).
COARSE_TIMER_S = 0.003
# 1 ms sleeps, back to back, so each after the first starts on a tick; the median is the step,
# so one slow wake-up on a busy machine does not make a fine timer look coarse.
CALIBRATION_SLEEPS = 5
_PROBE_S = 0.001

# Each loop's timer step, measured once: a loop may run on another selector (or OS) than the last.
_steps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[float]] = (
    weakref.WeakKeyDictionary()
)


async def _measure(loop: asyncio.AbstractEventLoop) -> float:
    durations = []
    for _ in range(CALIBRATION_SLEEPS):
        woken = loop.create_future()
        start = time.perf_counter()
        # The loop's timer itself, not ``asyncio.sleep``, which a test may have replaced.
        loop.call_later(_PROBE_S, woken.set_result, None)
        await woken
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def _measurement(loop: asyncio.AbstractEventLoop) -> asyncio.Task[float]:
    """The loop's measurement of its step: started on the first ask, then the same one."""
    step = _steps.get(loop)
    if step is None or step.cancelled():  # a loop shutting down cancels it; one that lives on remeasures
        step = _steps[loop] = loop.create_task(_measure(loop))
    return step


async def calibrate() -> float:
    """The running loop's timer step in seconds: how long a 1 ms sleep takes, typically.

    Measured once for each loop (about 6 ms on Linux, 80 ms on a coarse Windows timer), then
    remembered; the server awaits it at start-up, so its first requests are timed precisely too.

    >>> import asyncio
    >>> asyncio.run(calibrate()) >= 0.001
    True
    """
    step = _measurement(asyncio.get_running_loop())
    return step.result() if step.done() else await asyncio.shield(step)


def is_coarse(step_s: float) -> bool:
    """Whether a timer step is too coarse for the modeled delays (see ``COARSE_TIMER_S``).

    >>> is_coarse(0.0011), is_coarse(0.0156)
    (False, True)
    """
    return step_s > COARSE_TIMER_S


async def sleep(seconds: float, now: Callable[[], float] = time.perf_counter) -> None:
    """Sleep ``seconds`` by the clock ``now``, never ending before it nor a timer tick after it.

    A fine timer, or one not measured yet: one ``asyncio.sleep`` (and another if it woke early,
    as asyncio may by up to the monotonic clock's resolution). A coarse one: the loop's timer
    for all but the last tick, then yields to the loop until ``now()`` reaches the deadline.

    >>> import asyncio
    >>> asyncio.run(sleep(0.0))  # nothing to wait for: returns at once
    """
    if seconds <= 0:
        return
    deadline = now() + seconds
    measured = _measurement(asyncio.get_running_loop())
    step = measured.result() if measured.done() else 0.0  # measuring: sleep as on a fine timer
    if not is_coarse(step):
        await asyncio.sleep(seconds)
        while (remaining := deadline - now()) > 0:  # woken early
            await asyncio.sleep(remaining)
        return
    while (remaining := deadline - now()) > 0:
        # A timer sleep wakes up to one step late, so it stops a step short; the rest is yields.
        await asyncio.sleep(remaining - step if remaining > step else 0)
