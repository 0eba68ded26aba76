"""The decode clock: releases tokens on a deadline schedule at the model's speed.

Token ``i`` (from 0) is due at ``t0 + (i + 1) / tps``. Deadlines are computed
from the start, never by adding up sleeps, so a late wake-up does not push
every later token back: whatever is due when the loop wakes goes out at once,
in one chunk. That keeps the rate a client sees at 4,000 tokens/s and beyond
as accurate as at 65, even though the event loop cannot sleep 0.25 ms.

    >>> due_count(start=0.0, tps=1000.0, now=0.0105)  # 10.5 ms in, at 1,000 tokens/s
    10
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence


def due_count(start: float, tps: float, now: float) -> int:
    """How many tokens are due by ``now`` (token i is due at start + (i+1)/tps)."""
    return max(0, math.floor((now - start) * tps + 1e-9))


class DecodeClock:
    """Paces one response's output tokens; one clock spans all of its output items."""

    def __init__(self, tps: float, now: Callable[[], float] = time.perf_counter) -> None:
        if tps <= 0:
            raise ValueError("tokens per second must be positive")
        self.tps = tps
        self._now = now
        self.start = now()
        self.released = 0

    def deadline(self, index: int) -> float:
        return self.start + (index + 1) / self.tps

    async def pace(self, tokens: Sequence[int]) -> AsyncIterator[Sequence[int]]:
        """Yield ``tokens`` in chunks, each released once its last token is due."""
        sent = 0
        while sent < len(tokens):
            due = due_count(self.start, self.tps, self._now()) - self.released
            if due <= 0:  # not yet due (or woken early): sleep until the next deadline
                await asyncio.sleep(max(0.0, self.deadline(self.released) - self._now()))
                continue
            take = min(due, len(tokens) - sent)
            yield tokens[sent : sent + take]
            sent += take
            self.released += take
