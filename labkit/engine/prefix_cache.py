"""A prefix (KV) cache with vLLM-style block hashing.

The prompt is cut into full blocks of ``block_size`` tokens. A block's key is
the hash of its parent's key and its own tokens, so a key names the whole
prefix up to and including that block: two prompts share cached blocks exactly
as far as they share a prefix. A trailing partial block is never cached, which
is why ``cached_tokens`` is always a multiple of the block size.

    >>> cache = PrefixCache(block_size=4, capacity_tokens=64)
    >>> cache.lookup(list(range(10)))
    0
    >>> _ = cache.insert(list(range(10)))
    >>> cache.lookup(list(range(10)) + [99])
    8
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class CacheStats:
    lookups: int = 0
    hit_tokens: int = 0
    miss_tokens: int = 0
    evicted_blocks: int = 0


class PrefixCache:
    """Full-block prefix cache with LRU eviction and a capacity in tokens.

    On every use a chain's blocks are refreshed from its last block back to its
    first, so a parent is always more recent than its children and eviction
    trims prefixes from their tails, never cutting a chain off at its root.
    """

    def __init__(self, block_size: int = 16, capacity_tokens: int = 1_048_576) -> None:
        if block_size < 1 or capacity_tokens < block_size:
            raise ValueError("need block_size >= 1 and capacity_tokens >= block_size")
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.stats = CacheStats()

    def __len__(self) -> int:
        """Number of cached blocks."""
        return len(self._blocks)

    def block_keys(self, tokens: Sequence[int], known: Sequence[int] = ()) -> list[int]:
        """The chained key of every full block of ``tokens``.

        ``known`` are keys already computed for a prefix of the same tokens (say,
        of the conversation before this turn's items): only the blocks after them
        are hashed, so a growing conversation costs only its growth.
        """
        size = self.block_size
        keys = list(known[: len(tokens) // size])
        parent = keys[-1] if keys else 0
        for start in range(len(keys) * size, len(tokens) - size + 1, size):
            parent = hash((parent, *tokens[start : start + size]))
            keys.append(parent)
        return keys

    def lookup(self, tokens: Sequence[int], known: Sequence[int] = ()) -> int:
        """How many leading tokens of ``tokens`` are cached (a multiple of the block size)."""
        hits = []
        for key in self.block_keys(tokens, known):
            if key not in self._blocks:
                break
            hits.append(key)
        self._refresh(hits)
        cached = len(hits) * self.block_size
        self.stats.lookups += 1
        self.stats.hit_tokens += cached
        self.stats.miss_tokens += len(tokens) - cached
        return cached

    def insert(self, tokens: Sequence[int], known: Sequence[int] = ()) -> list[int]:
        """Cache every full block of ``tokens``, evicting least recently used blocks; returns their keys."""
        keys = self.block_keys(tokens, known)
        for key in keys:
            self._blocks.setdefault(key, None)
        self._refresh(keys)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
            self.stats.evicted_blocks += 1
        return keys

    def _refresh(self, keys: list[int]) -> None:
        for key in reversed(keys):
            self._blocks.move_to_end(key)

    @property
    def cached_tokens(self) -> int:
        return len(self._blocks) * self.block_size
