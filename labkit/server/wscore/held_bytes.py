"""What a WebSocket client's frames make the server hold, in bytes, per connection and per key.

A frame a connection has not used yet is held: a ``response.create`` until it starts, a
``response.steer``'s input until the response that carries it is created (or it is returned),
a ``response.inject``'s or a ``response.append``'s input until the rollout takes it (or it is
returned). Counting them only by number would let one connection hold 16 lanes × 16 injects of
2 MiB (half a gigabyte), and one key any number of such connections. So each connection has a
``HeldBytes`` of its own, bounded (``ServerLimits.max_queued_bytes``), within one shared by every
connection of its key (``--max-held-bytes-per-key``, ``KeyLimiter.holding``): a frame that would
take either past its bound is refused, in the API's shape, and nothing else on the connection
changes. A connection that ends gives back everything it held (``release``).

    >>> key = HeldBytes(100, "this API key")
    >>> one, two = HeldBytes(80, "this connection", key), HeldBytes(80, "this connection", key)
    >>> one.take(60), two.take(30), two.full(10)
    (True, True, None)
    >>> two.take(20), two.full(20).where
    (False, 'this API key')
    >>> one.release(); key.held
    30
"""

from __future__ import annotations


class HeldBytes:
    """Bytes held against ``limit`` (None: no bound), and against the bound of ``within`` too."""

    def __init__(self, limit: int | None, where: str, within: HeldBytes | None = None) -> None:
        self.limit = limit
        self.where = where  # what holds them, as a refusal names it: "this connection", "this API key"
        self.within = within
        self.held = 0

    def full(self, size: int) -> HeldBytes | None:
        """The bound ``size`` more bytes would pass (this one's, or its key's), None if none."""
        if self.limit is not None and self.held + size > self.limit:
            return self
        return self.within.full(size) if self.within is not None else None

    def take(self, size: int) -> bool:
        """Hold ``size`` bytes more if every bound has room for them; False (nothing held) if not."""
        if self.full(size) is not None:
            return False
        self._add(size)
        return True

    def give_back(self, size: int) -> None:
        """``size`` bytes held are used (started, committed, taken) or returned: held no more."""
        self._add(-size)

    def _add(self, size: int) -> None:
        self.held += size
        if self.within is not None:
            self.within._add(size)

    def release(self) -> None:
        """Give back everything held: the connection has ended."""
        self.give_back(self.held)

    def refusal(self, size: int) -> str:
        """Why ``size`` more bytes are refused, for the refusal's message (past a bound only).

        >>> HeldBytes(100, "this connection").refusal(150)
        'this connection already holds 0 bytes of input not yet used (at most 100)'
        """
        full = self.full(size) or self
        return (
            f"{full.where} already holds {full.held:,} bytes of input not yet used (at most {full.limit:,})"
        )
