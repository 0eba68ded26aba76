"""The decode clock: releases tokens on a deadline schedule at the model's speed.

Token ``i`` (from 0) is due at ``t0 + (i + 1) / tps``. Deadlines are computed
from the start, never by adding up sleeps, so a late wake-up does not push
every later token back: whatever is due when the loop wakes goes out at once,
in one chunk. That keeps the rate a client sees at 4,000 tokens/s and beyond
as accurate as at 65, even though the event loop cannot sleep 0.25 ms.

    >>> due_count(start=0.0, tps=1000.0, now=0.0105)  # 10.5 ms in, at 1,000 tokens/s
    10

Under load the clock coalesces on purpose, too. Every delta costs the server
about the same whatever it carries (an event, a frame, a write), so the
server caps the deltas it sends, not the tokens: with ``n`` responses decoding
at once (``Pacing.active``), a response's deltas go out at least
``n / MAX_DELTAS_PER_S`` seconds apart, each carrying every token due by then.
At 64 streams that is one delta per 8 ms (8 tokens at 1,000 tokens/s); a
single stream is never held back below 8,000 tokens/s. The releases fall on a
grid of that interval shared by every stream, so one wake-up of the event loop
serves them all (a loop wake-up costs more than the delta it sends). The first
delta still goes out when the first token is due (time to first token is
unchanged), and the last one of each ``pace`` when its last token is due, so
the rate a client measures from first delta to last stays exact.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence

from labkit.engine import timing


def due_count(start: float, tps: float, now: float) -> int:
    """How many tokens are due by ``now`` (token i is due at start + (i+1)/tps)."""
    return max(0, math.floor((now - start) * tps + 1e-9))


# Deltas a second the server sends across all the responses it decodes at once (see above).
MAX_DELTAS_PER_S = 8000.0


class Pacing:
    """The load every clock in a process shares: how many responses are decoding right now.

    >>> pacing = Pacing()
    >>> pacing.active = 64
    >>> pacing.interval()  # seconds between one response's deltas
    0.008
    """

    def __init__(self, max_deltas_per_s: float = MAX_DELTAS_PER_S) -> None:
        self.max_deltas_per_s = max_deltas_per_s
        self.active = 0  # clocks inside ``pace``

    def interval(self) -> float:
        return self.active / self.max_deltas_per_s


SHARED_PACING = Pacing()


class DecodeClock:
    """Paces one response's output tokens; one clock spans all of its output items."""

    def __init__(
        self,
        tps: float,
        now: Callable[[], float] = time.perf_counter,
        pacing: Pacing = SHARED_PACING,
    ) -> None:
        if tps <= 0:
            raise ValueError("tokens per second must be positive")
        self.tps = tps
        self._now = now
        self.pacing = pacing
        self.start = now()
        self.released = 0
        self.last_release: float | None = None  # when the previous delta went out

    def deadline(self, index: int) -> float:
        return self.start + (index + 1) / self.tps

    def _next_release(self, last: int) -> float:
        """When the next delta may go out: its first token's deadline, or under load the first
        point of the load's grid at least one interval after the previous delta, but never
        later than ``last``'s deadline (the last token of this ``pace``: the end of an item is
        never held back)."""
        due = self.deadline(self.released)
        interval = self.pacing.interval()
        if self.last_release is None or interval <= 1 / self.tps:  # no load to speak of
            return due
        # One grid for every clock in the process (multiples of the interval on the shared
        # clock), so a single wake-up of the event loop serves every stream due at that point.
        earliest = max(due, self.last_release + interval)
        release = math.ceil(earliest / interval - 1e-6) * interval
        return min(release, self.deadline(last))

    async def pace(self, tokens: Sequence[int]) -> AsyncIterator[Sequence[int]]:
        """Yield ``tokens`` in chunks, each released once its last token is due."""
        sent = 0
        self.pacing.active += 1
        try:
            while sent < len(tokens):
                now = self._now()
                release = self._next_release(self.released + len(tokens) - sent - 1)
                due = due_count(self.start, self.tps, now) - self.released
                if due <= 0 or now < release:  # not yet (or woken early): sleep until it is
                    if release > now:  # not a coarse (Windows) tick late: see labkit.engine.timing
                        await timing.sleep(release - now, now=self._now)
                    else:  # due by the deadline, not by the count (float rounding): let the loop run
                        await asyncio.sleep(0)
                    continue
                take = min(due, len(tokens) - sent)
                # The grid point this delta belongs to, not the wake-up: a late wake-up keeps
                # the grid, and the next delta goes at the next grid point (one per point).
                grid = self.pacing.interval()
                self.last_release = max(release, math.floor(now / grid) * grid)
                yield tokens[sent : sent + take]
                sent += take
                self.released += take
        finally:
            self.pacing.active -= 1
