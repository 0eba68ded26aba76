"""The sprint's render cache: rendered tokens kept in memory, keyed by the conversation prefix.

A stateless request carries its whole history. Instead of tokenizing it all
again, the server hashes the conversation block by block (a chained hash of
what each item renders to, far cheaper than tokenizing) and looks for the
longest prefix it has rendered before; only the items after it are tokenized.

    >>> from labkit.engine.render import TokenBuffer
    >>> cache = RenderCache()
    >>> items = [{"type": "message", "role": "user", "content": "hi"}]
    >>> buf = TokenBuffer.start("Be brief.", []); _ = buf.append(items)
    >>> cache.put(prefix_keys(buf.key, items)[-1], buf)
    >>> hit, used = cache.longest_prefix(prefix_keys(buf.key, items + items))
    >>> used, hit.ids == buf.ids
    (1, True)

It holds views of buffers (forks: no copy), the least recently used going first past a
bound on the bytes its entries hold, and only the event loop's thread may touch it (views
of one buffer share its ids).

The cache is shared by every key a server serves, so each key's keys are its
own: a hasher made for an owner seeds its hash with the owner, and another
owner's same conversation never finds it (nor learns that it was rendered).

    >>> cache.longest_prefix(prefix_keys(buf.key, items, owner="key_b"))
    (None, 0)
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache

from labkit.engine.render import TokenBuffer, item_block

# What an entry costs (measured with tracemalloc on CPython 3.11; a test checks both): a token id
# (or a block key) is an int of its own (32 bytes) and its list slot (8, and about 1/8 more as a
# list grows); an entry's key, its fork and the cache's bookkeeping come to about 420 bytes.
BYTES_PER_ID = 41
ENTRY_BYTES = 512
CAPACITY_BYTES = 4_000_000 * BYTES_PER_ID  # about four million tokens of renderings


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


def buffer_bytes(buffer: TokenBuffer) -> int:
    """What an entry holding ``buffer`` costs, counted as if its ids were its own (forks share them).

    >>> buffer_bytes(TokenBuffer("key", ids=[1, 2, 3]))
    635
    """
    return ENTRY_BYTES + BYTES_PER_ID * (len(buffer) + len(buffer.block_keys))


class RenderCache:
    """An LRU of rendered buffers, each under the key of the prefix it renders (``cachetools``),
    bounded by the bytes its entries hold (``buffer_bytes``). The event loop's thread only."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES) -> None:
        self._buffers: LRUCache[str, TokenBuffer] = LRUCache(capacity_bytes, getsizeof=buffer_bytes)
        self._thread = threading.get_ident()  # the thread that made it: the event loop's

    def __len__(self) -> int:
        return len(self._buffers)

    @property
    def bytes(self) -> int:
        """What the entries hold, by ``buffer_bytes``: at most ``capacity_bytes``."""
        return int(self._buffers.currsize)

    @property
    def capacity_bytes(self) -> int:
        return int(self._buffers.maxsize)

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise RuntimeError("the render cache belongs to the event loop's thread")

    def put(self, key: str, buffer: TokenBuffer) -> None:
        """Keep a view of ``buffer`` (a fork: no copy; it shares the ids of a conversation that
        goes on growing, and still ends where it ends now). One larger than the whole cache is
        not kept."""
        self._check_thread()
        entry = buffer.fork()
        if buffer_bytes(entry) <= self.capacity_bytes:
            self._buffers[key] = entry

    def longest_prefix(self, keys: Sequence[str]) -> tuple[TokenBuffer | None, int]:
        """The cached buffer for the longest known prefix, forked, and how many items it covers."""
        self._check_thread()
        for used in range(len(keys), 0, -1):
            found = self._buffers.get(keys[used - 1])  # a hit is now the most recently used
            if found is not None:
                return found.fork(), used
        return None, 0
