"""The sprint's render cache: rendered tokens kept in memory, keyed by the conversation prefix.

A stateless request carries its whole history. Instead of tokenizing it all
again, the server hashes the conversation block by block (a chained hash of
what each item renders to, far cheaper than tokenizing) and looks for the
longest prefix it has rendered before; only the items after it are tokenized.

    >>> from labkit.engine.render import TokenBuffer
    >>> cache = RenderCache(capacity_tokens=1000)
    >>> items = [{"type": "message", "role": "user", "content": "hi"}]
    >>> buf = TokenBuffer.start("Be brief.", []); _ = buf.append(items)
    >>> cache.put(prefix_keys(buf.key, items)[-1], buf)
    >>> hit, used = cache.longest_prefix(prefix_keys(buf.key, items + items))
    >>> used, hit.ids == buf.ids
    (1, True)

The cache is shared by every key a server serves, so each key's keys are its
own: a hasher made for an owner seeds its hash with the owner, and another
owner's same conversation never finds it (nor learns that it was rendered).

    >>> cache.longest_prefix(prefix_keys(buf.key, items, owner="key_b"))
    (None, 0)
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from labkit.engine.render import TokenBuffer, item_block


class PrefixHasher:
    """A running hash over the system block and then item after item.

    Key ``i`` names the system block and items ``0..i`` (and, given one, their owner):
    equal keys, equal tokens. It can be copied and extended, so a conversation that
    grows is hashed only where it grew.
    """

    def __init__(self, header: str, owner: str | None = None) -> None:
        self._running = hashlib.sha256(header.encode())
        if owner is not None:  # owners never share an entry: see the module's docstring
            self._running.update(b"\x02" + owner.encode())
        self.count = 0  # items hashed so far
        self.last: str | None = None  # the key after the last item

    def extend(self, items: Sequence[dict[str, Any]]) -> list[str]:
        keys = []
        for item in items:
            block_header, body = item_block(item)
            self._running.update(b"\x00" + block_header.encode() + b"\x01" + body.encode())
            keys.append(self._running.copy().hexdigest())
        self.count += len(keys)
        self.last = keys[-1] if keys else self.last
        return keys

    def copy(self) -> PrefixHasher:
        twin = PrefixHasher.__new__(PrefixHasher)
        twin._running, twin.count, twin.last = self._running.copy(), self.count, self.last
        return twin


def prefix_keys(header: str, items: Sequence[dict[str, Any]], owner: str | None = None) -> list[str]:
    """The key of every prefix of ``items`` (see ``PrefixHasher``)."""
    return PrefixHasher(header, owner).extend(items)


class RenderCache:
    """An LRU of rendered buffers, each stored under the key of the prefix it renders.

    Bounded by the tokens it holds (about 36 bytes each as Python ints; buffers that
    share ids are each counted as if they held their own), so a
    server with many long conversations keeps its memory in check, and by the
    number of buffers, so many tiny conversations do not grow it by their overhead.
    """

    def __init__(self, capacity_tokens: int = 4_000_000, max_entries: int = 10_000) -> None:
        self.capacity_tokens = capacity_tokens
        self.max_entries = max_entries
        self.tokens = 0
        self._buffers: OrderedDict[str, TokenBuffer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buffers)

    def put(self, key: str, buffer: TokenBuffer) -> None:
        """Keep a view of ``buffer`` (a fork: no copy; it shares the ids of a conversation that
        goes on growing, and still ends where it ends now)."""
        old = self._buffers.pop(key, None)
        self.tokens -= len(old) if old else 0
        self._buffers[key] = buffer.fork()
        self.tokens += len(buffer)
        while len(self._buffers) > 1 and (
            self.tokens > self.capacity_tokens or len(self._buffers) > self.max_entries
        ):
            _, evicted = self._buffers.popitem(last=False)
            self.tokens -= len(evicted)

    def longest_prefix(self, keys: Sequence[str]) -> tuple[TokenBuffer | None, int]:
        """The cached buffer for the longest known prefix, forked, and how many items it covers."""
        for used in range(len(keys), 0, -1):
            found = self._buffers.get(keys[used - 1])
            if found is not None:
                self._buffers.move_to_end(keys[used - 1])
                return found.fork(), used
        return None, 0
