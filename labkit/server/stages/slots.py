"""A replica's engine slots, shared fairly between keys.

A replica decodes ``capacity`` responses at once (the profile's ``engine.max_concurrent``);
the rest wait for a slot. Two rules keep one key from holding up the others:

- **Fair order.** A freed slot goes to the waiting response whose key holds the fewest slots
  on the replica, and among those to the key served longest ago (then the earliest waiter),
  not to the oldest waiter: keys take turns, and a key with a hundred responses waiting never
  holds up a key with one.
- **A share per key.** With ``share``, no key holds more than that many slots of the replica
  at once, whatever else waits, so there are always slots for the others. A learner who asks
  for 128 long answers at once (and never reads them) holds ``share`` of each replica, and the
  room's next "hi" finds a free slot. ``labkit serve`` sets it by default where keys are
  required (``default_share``): on an open server any client may send any key, so a share
  per key would only ask a greedy client to invent keys.

    >>> import asyncio
    >>> async def demo() -> list[str]:
    ...     slots, order = EngineSlots(capacity=2, share=1), []
    ...     await slots.acquire("greedy")            # its share: one slot
    ...     more = asyncio.ensure_future(slots.acquire("greedy"))
    ...     await asyncio.sleep(0)                   # waits, with a slot still free ...
    ...     order.append(f"greedy waits: {not more.done()}")
    ...     waited = await slots.acquire("learner")  # ... which the learner takes at once
    ...     order.append(f"learner waited: {waited}")
    ...     slots.release("greedy"); await more
    ...     return order
    >>> asyncio.run(demo())
    ['greedy waits: True', 'learner waited: False']
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass

SHARE_OF_SLOTS = 4  # where keys are required, a key holds at most 1/4 of a replica's slots


def default_share(capacity: int, keys_required: bool) -> int | None:
    """A key's share of a replica's slots unless the command line says otherwise.

    >>> default_share(32, keys_required=True), default_share(32, keys_required=False)
    (8, None)
    """
    return max(1, capacity // SHARE_OF_SLOTS) if keys_required else None


@dataclass
class _Waiter:
    seq: int
    owner: str
    granted: asyncio.Future[None]


class EngineSlots:
    """One replica's slots: at most ``capacity`` held at once, at most ``share`` by one key."""

    def __init__(self, capacity: int, share: int | None = None) -> None:
        self.capacity = capacity
        self.share = share
        self.busy = 0  # slots held now
        self.held: Counter[str] = Counter()  # ... by key
        self._waiting: list[_Waiter] = []  # in the order they came
        self._served: dict[str, int] = {}  # when each key holding or waiting was last given a slot
        self._count = itertools.count()

    def may_take(self, owner: str) -> bool:
        return self.busy < self.capacity and (self.share is None or self.held[owner] < self.share)

    async def acquire(self, owner: str) -> bool:
        """Take a slot for ``owner``'s response, waiting if none is free for it; True if it waited.

        No waiter that could take a free slot is ever left waiting (``_grant`` runs at every
        release), so one that finds a slot free for its key takes it at once."""
        if self.may_take(owner):
            self._take(owner)
            return False
        waiter = _Waiter(next(self._count), owner, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(owner)  # granted, then cancelled before it could use the slot
            else:
                self._waiting.remove(waiter)
                self._forget_if_idle(owner)
            raise
        return True

    def release(self, owner: str) -> None:
        self.busy -= 1
        self.held[owner] -= 1
        if self.held[owner] <= 0:
            del self.held[owner]
        self._forget_if_idle(owner)
        self._grant()

    def _take(self, owner: str) -> None:
        self.busy += 1
        self.held[owner] += 1
        self._served[owner] = next(self._count)

    def _forget_if_idle(self, owner: str) -> None:
        """A key that holds nothing and waits for nothing is forgotten: memory for active keys only."""
        if owner not in self.held and all(w.owner != owner for w in self._waiting):
            self._served.pop(owner, None)

    def _grant(self) -> None:
        """Hand free slots to the waiters that may take them: fewest held by their key first, then
        the key served longest ago, then the earliest waiter."""
        while self.busy < self.capacity:
            # A waiter whose task was cancelled (its ``granted`` cancelled with it) takes nothing:
            # its task, when it runs, leaves the queue. Handing it the slot would lose the slot.
            eligible = [w for w in self._waiting if not w.granted.done() and self.may_take(w.owner)]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self.held[w.owner], self._served.get(w.owner, -1), w.seq))
            self._waiting.remove(chosen)
            self._take(chosen.owner)
            chosen.granted.set_result(None)
