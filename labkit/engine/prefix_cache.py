"""A prefix (KV) cache with vLLM-style block hashing, in one module: its block tree, eviction and
owners' views keep one invariant (a cached block's parent is cached), so they are read together.

The prompt is cut into full blocks of ``block_size`` tokens. A block's hash
chains its parent's hash and its own tokens, so a hash names the whole
prefix up to and including that block: two prompts share cached blocks exactly
as far as they share a prefix. A trailing partial block is never cached, which
is why ``cached_tokens`` is always a multiple of the block size.

    >>> cache = PrefixCache(block_size=4, capacity_tokens=64)
    >>> cache.lookup(list(range(10)))
    0
    >>> _ = cache.insert(list(range(10)))
    >>> cache.lookup(list(range(10)) + [99])
    8

A conversation that grows costs only its growth. Its caller keeps the hashes of
the blocks it has already had hashed (``known``) and passes them back: the
cache hashes only the blocks after them, and its bookkeeping touches a fixed
number of blocks plus the new ones, however long the conversation is
(``CacheWork`` counts both). The generation prompt that follows a rendered
conversation is passed as ``tail``, so the caller never builds a copy of the
conversation to add it.

    >>> hashes = cache.insert(list(range(10)))         # 2 blocks: their hashes
    >>> work = CacheWork()
    >>> cache.lookup(list(range(30)), hashes, work=work)  # hashes blocks 3..7 only
    8
    >>> work.hashed_blocks
    5

A cache shared by several owners (API keys) keeps each owner's blocks apart: an
owner's view (``scoped``) seeds the first block's hash with the owner, so its
chains never meet another owner's and a hit says nothing about anyone else's
prompts, while the blocks of all of them share one capacity, as on one GPU.

    >>> alice, bob = cache.scoped("key_a"), cache.scoped("key_b")
    >>> _ = alice.insert(list(range(10)))
    >>> alice.lookup(list(range(10))), bob.lookup(list(range(10)))
    (8, 0)
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

NO_PARENT = -1  # a root block's parent in the tree; ``hash()`` never returns -1
UNSCOPED = 0  # what the first block's hash is chained from, for a cache used without an owner


def scope_seed(owner: str) -> int:
    """What the first block's hash of ``owner``'s chains is chained from (stable across runs).

    >>> scope_seed("key_a") == scope_seed("key_a") != scope_seed("key_b")
    True
    """
    return int.from_bytes(hashlib.sha256(owner.encode()).digest()[:8], "big", signed=True)


@dataclass
class CacheStats:
    lookups: int = 0
    hit_tokens: int = 0
    miss_tokens: int = 0
    evicted_blocks: int = 0


@dataclass
class CacheWork:
    """The cache's bookkeeping work, counted (a mechanism test reads these, not the clock).

    ``hashed_blocks``: block hashes computed (the tokens of each hashed);
    ``touched_blocks``: blocks whose entry was read or written: presence checks, blocks
    added, refreshed or evicted, and entries rebuilt.
    """

    hashed_blocks: int = 0
    touched_blocks: int = 0

    def add(self, hashed: int, touched: int) -> None:
        self.hashed_blocks += hashed
        self.touched_blocks += touched


class PrefixCache:
    """Full-block prefix cache with LRU eviction and a capacity in tokens.

    The cached blocks form a tree: each block's parent is the block before it in
    its chain. Eviction takes the least recently used *leaf* (a block no cached
    block continues), so a chain is trimmed from its tail and never cut off at
    its root, and a cached block's parent is always cached: presence is monotone
    along a chain. That is what keeps each use cheap:

    - ``lookup`` checks the last ``known`` hash (if it is cached, so is every block
      before it) and then only the new blocks, one by one; without known hashes,
      a binary search over the chain finds how far it is cached;
    - a use refreshes only the tail of what it used. A parent that an eviction
      leaves without children takes the most recent use among the children it
      had, so blocks leave in the order of the rule "every use refreshes its
      whole chain, tail first, root last": least recent chain first, tail first.

    Leaves wait in a heap by last use; an entry made stale by a later use is
    dropped when it surfaces, and the heap is rebuilt when stale entries
    outnumber the blocks (amortized O(1) per use).
    """

    def __init__(self, block_size: int = 16, capacity_tokens: int = 1_048_576) -> None:
        if block_size < 1 or capacity_tokens < block_size:
            raise ValueError("need block_size >= 1 and capacity_tokens >= block_size")
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        # Per cached block, by its hash (dicts of ints: the garbage collector never walks them).
        self._used: dict[int, int] = {}  # block -> last use (a counter); membership = cached
        self._parent: dict[int, int] = {}  # block -> its parent, or NO_PARENT
        self._children: dict[int, int] = {}  # block -> cached children, for blocks that have any
        self._leaves: list[tuple[int, int]] = []  # heap of (last use, block), some entries stale
        self._clock = 0
        self.stats = CacheStats()
        self.work = CacheWork()  # since the cache was made

    def __len__(self) -> int:
        """Number of cached blocks."""
        return len(self._used)

    # ------------------------------------------------------------ hashes

    def _new_hashes(
        self, tokens: Sequence[int], known: Sequence[int], tail: Sequence[int], seed: int = UNSCOPED
    ) -> tuple[int, list[int]]:
        """How many ``known`` hashes apply to ``tokens + tail``, and the hashes of the full blocks after them.

        Only the tokens after the known blocks are read (a slice), so a caller's long
        prefix is never copied. ``seed`` is what the first block is chained from (its owner's).
        """
        size = self.block_size
        blocks = (len(tokens) + len(tail)) // size
        count = min(len(known), blocks)
        start = count * size
        rest = [*tokens[start:], *tail] if start < len(tokens) else list(tail[start - len(tokens) :])
        parent = known[count - 1] if count else seed  # known hashes carry the seed they were made with
        hashes = []
        for i in range(0, len(rest) - size + 1, size):
            parent = hash((parent, *rest[i : i + size]))
            hashes.append(parent)
        return count, hashes

    def block_hashes(
        self,
        tokens: Sequence[int],
        known: Sequence[int] = (),
        *,
        tail: Sequence[int] = (),
        seed: int = UNSCOPED,
    ) -> list[int]:
        """The chained hash of every full block of ``tokens + tail`` (a new list).

        ``known`` are hashes already computed for a prefix of the same tokens (say,
        of the conversation before this turn's items): only the blocks after them
        are hashed.
        """
        count, hashes = self._new_hashes(tokens, known, tail, seed)
        self.work.add(len(hashes), 0)
        return [*known[:count], *hashes]

    # ------------------------------------------------------------ presence

    def _cached_prefix(self, known: Sequence[int], count: int, hashes: list[int]) -> tuple[int, int]:
        """How many leading blocks of the chain ``known[:count] + hashes`` are cached, and the
        number of presence checks it took (monotone presence: see the class)."""
        total = count + len(hashes)
        used = self._used

        def hash_at(i: int) -> int:
            return known[i] if i < count else hashes[i - count]

        if total == 0:
            return 0, 0
        probes = 1
        last = count - 1 if count else total - 1  # the last known hash, or the chain's tail
        if hash_at(last) in used:
            found = last + 1
            while found < total:  # only the new blocks, up to the first one not cached
                probes += 1
                if hash_at(found) not in used:
                    break
                found += 1
            return found, probes
        low, high = 0, last  # hash_at(low - 1) is cached (or low == 0), hash_at(high) is not
        while low < high:
            middle = (low + high) // 2
            probes += 1
            if hash_at(middle) in used:
                low = middle + 1
            else:
                high = middle
        return low, probes

    # ------------------------------------------------------------ use

    def lookup(
        self,
        tokens: Sequence[int],
        known: Sequence[int] = (),
        *,
        tail: Sequence[int] = (),
        work: CacheWork | None = None,
        seed: int = UNSCOPED,
    ) -> int:
        """How many leading tokens of ``tokens + tail`` are cached (a multiple of the block size).

        A hit refreshes the chain up to its last cached block.
        """
        count, hashes = self._new_hashes(tokens, known, tail, seed)
        hits, touched = self._cached_prefix(known, count, hashes)
        if hits:
            touched += self._refresh(known[hits - 1] if hits <= count else hashes[hits - 1 - count])
        cached = hits * self.block_size
        self.stats.lookups += 1
        self.stats.hit_tokens += cached
        self.stats.miss_tokens += len(tokens) + len(tail) - cached
        self._count(work, len(hashes), touched)
        return cached

    def insert(
        self,
        tokens: Sequence[int],
        known: Sequence[int] = (),
        *,
        tail: Sequence[int] = (),
        work: CacheWork | None = None,
        seed: int = UNSCOPED,
    ) -> list[int]:
        """Cache every full block of ``tokens + tail``, evicting least recently used leaves.

        Returns the hashes of the blocks after ``known`` (all of them without ``known``):
        what a caller appends to the hashes it keeps.
        """
        count, hashes = self._new_hashes(tokens, known, tail, seed)
        total = count + len(hashes)
        if total == 0:
            self._count(work, 0, 0)
            return hashes
        present, touched = self._cached_prefix(known, count, hashes)
        stamp = self._clock + 1  # the use about to be recorded; new inner blocks share it
        for i in range(present, total):
            block = known[i] if i < count else hashes[i - count]
            parent = NO_PARENT if i == 0 else known[i - 1] if i - 1 < count else hashes[i - 1 - count]
            self._used[block], self._parent[block] = stamp, parent
            if parent != NO_PARENT:
                self._children[parent] = self._children.get(parent, 0) + 1
        touched += total - present
        touched += self._refresh(known[total - 1] if total <= count else hashes[total - 1 - count])
        touched += self._evict()
        self._count(work, len(hashes), touched)
        return hashes

    def _count(self, work: CacheWork | None, hashed: int, touched: int) -> None:
        self.work.add(hashed, touched)
        if work is not None:
            work.add(hashed, touched)

    def _refresh(self, block: int) -> int:
        """Record a use of the chain ending at ``block``: only that block's entry changes."""
        self._clock += 1
        self._used[block] = self._clock
        if block not in self._children:
            heapq.heappush(self._leaves, (self._clock, block))
            if len(self._leaves) > 2 * len(self._used) + 1024:
                return 1 + self._rebuild()
        return 1

    def _rebuild(self) -> int:
        """Drop the heap's stale entries: one entry per leaf again."""
        children = self._children
        self._leaves = [(used, block) for block, used in self._used.items() if block not in children]
        heapq.heapify(self._leaves)
        return len(self._used)

    def _evict(self) -> int:
        """Evict least recently used leaves until the cache is within capacity; returns blocks touched."""
        touched = 0
        used, children = self._used, self._children
        while len(used) > self.capacity_blocks:
            stamp, block = heapq.heappop(self._leaves)
            if used.get(block) != stamp or block in children:
                continue  # stale: used again since, or it has children now
            del used[block]
            parent = self._parent.pop(block)
            self.stats.evicted_blocks += 1
            touched += 1
            if parent == NO_PARENT:
                continue
            touched += 1
            left = children[parent] - 1
            if left:
                children[parent] = left
                continue
            # A leaf now: it was last used when its most recent child was (or later).
            del children[parent]
            used[parent] = max(used[parent], stamp)
            heapq.heappush(self._leaves, (used[parent], parent))
        return touched

    @property
    def cached_tokens(self) -> int:
        return len(self._used) * self.block_size

    def scoped(self, owner: str) -> ScopedCache:
        """``owner``'s view of this cache: its own chains, the shared blocks and capacity."""
        return ScopedCache(self, scope_seed(owner))


class ScopedCache:
    """One owner's view of a shared ``PrefixCache``, used as the cache itself is.

    Every chain it hashes starts from the owner's seed, so the same prompt from two owners
    makes two chains: neither hits the other's blocks. Hashes it returns (``known`` for its
    next use) carry the seed, so a conversation that grows stays the owner's.
    """

    def __init__(self, cache: PrefixCache, seed: int) -> None:
        self.cache = cache
        self.seed = seed

    def __bool__(self) -> bool:
        return True  # a view is something, even of an empty cache (``cache or PrefixCache()``)

    @property
    def block_size(self) -> int:
        return self.cache.block_size

    def block_hashes(
        self, tokens: Sequence[int], known: Sequence[int] = (), *, tail: Sequence[int] = ()
    ) -> list[int]:
        return self.cache.block_hashes(tokens, known, tail=tail, seed=self.seed)

    def lookup(
        self,
        tokens: Sequence[int],
        known: Sequence[int] = (),
        *,
        tail: Sequence[int] = (),
        work: CacheWork | None = None,
    ) -> int:
        return self.cache.lookup(tokens, known, tail=tail, work=work, seed=self.seed)

    def insert(
        self,
        tokens: Sequence[int],
        known: Sequence[int] = (),
        *,
        tail: Sequence[int] = (),
        work: CacheWork | None = None,
    ) -> list[int]:
        return self.cache.insert(tokens, known, tail=tail, work=work, seed=self.seed)
