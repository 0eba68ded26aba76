"""The sprint's render cache: rendered tokens kept in memory, keyed by the conversation prefix.

A stateless request carries its whole history. Instead of tokenizing it all
again, the server hashes the conversation block by block (a chained hash of
what each item renders to, far cheaper than tokenizing) and looks for the
longest prefix it has rendered before; only the items after it are tokenized.

    >>> from labkit.engine.render import TokenBuffer
    >>> cache = RenderCache(capacity=8)
    >>> items = [{"type": "message", "role": "user", "content": "hi"}]
    >>> buf = TokenBuffer.start("Be brief.", []); _ = buf.append(items)
    >>> cache.put(prefix_keys(buf.key, items)[-1], buf)
    >>> hit, used = cache.longest_prefix(prefix_keys(buf.key, items + items))
    >>> used, hit.ids == buf.ids
    (1, True)
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from labkit.engine.render import TokenBuffer, item_block


def prefix_keys(header: str, items: Sequence[dict[str, Any]]) -> list[str]:
    """Key ``i`` names the system block and items ``0..i``; equal keys render equal tokens."""
    keys, running = [], hashlib.sha256(header.encode())
    for item in items:
        block_header, body = item_block(item)
        running.update(b"\x00" + block_header.encode() + b"\x01" + body.encode())
        keys.append(running.copy().hexdigest())
    return keys


class RenderCache:
    """An LRU of rendered buffers, each stored under the key of the prefix it renders."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._buffers: OrderedDict[str, TokenBuffer] = OrderedDict()

    def put(self, key: str, buffer: TokenBuffer) -> None:
        self._buffers[key] = buffer.fork()
        self._buffers.move_to_end(key)
        while len(self._buffers) > self.capacity:
            self._buffers.popitem(last=False)

    def longest_prefix(self, keys: Sequence[str]) -> tuple[TokenBuffer | None, int]:
        """The cached buffer for the longest known prefix, forked, and how many items it covers."""
        for used in range(len(keys), 0, -1):
            found = self._buffers.get(keys[used - 1])
            if found is not None:
                self._buffers.move_to_end(keys[used - 1])
                return found.fork(), used
        return None, 0
