"""The prefix (KV) cache: full blocks, chained block hashes, LRU eviction from a chain's tail."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.engine.prefix_cache import CacheStats, CacheWork, PrefixCache

pytestmark = pytest.mark.slow  # property searches


def seq(start: int, length: int) -> list[int]:
    return list(range(start, start + length))


# ---------------------------------------------------------------- block-granular hits


def test_an_empty_cache_misses() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    assert cache.lookup(seq(0, 10)) == 0
    assert len(cache) == 0


def test_only_full_blocks_are_cached() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    cache.insert(seq(0, 11))  # two full blocks and a partial one
    assert len(cache) == 2
    assert cache.cached_tokens == 8
    assert cache.lookup(seq(0, 11)) == 8
    assert cache.lookup(seq(0, 3)) == 0  # shorter than a block


@pytest.mark.parametrize("length", [4, 5, 7, 8, 9, 15, 16, 17])
def test_hits_are_a_multiple_of_the_block_size(length: int) -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    cache.insert(seq(0, 16))
    assert cache.lookup(seq(0, length)) == min(length, 16) // 4 * 4


def test_a_shared_prefix_hits_up_to_the_first_differing_block() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    tokens = seq(0, 16)
    cache.insert(tokens)
    changed = list(tokens)
    changed[9] = 999  # inside the third block
    assert cache.lookup(changed) == 8
    changed[0] = 999  # now the first block differs too
    assert cache.lookup(changed) == 0


def test_a_conversation_that_grows_hits_its_whole_previous_prompt() -> None:
    cache = PrefixCache(block_size=16, capacity_tokens=4096)
    turn1 = seq(0, 100)
    cache.insert(turn1)
    turn2 = [*turn1, *seq(500, 50)]
    assert cache.lookup(turn2) == 96
    cache.insert(turn2)
    assert cache.lookup([*turn2, 7]) == 144


# ---------------------------------------------------------------- chained hashes


def test_same_block_after_a_different_parent_is_a_miss() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    a, b, c = seq(0, 4), seq(10, 4), seq(20, 4)
    cache.insert([*a, *b])
    assert cache.lookup([*a, *b]) == 8
    assert cache.lookup([*c, *b]) == 0  # b is cached, but only after a
    assert cache.lookup(b) == 0  # b at position 0 is another prefix


def test_same_block_at_a_different_position_is_a_miss() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    a, b = seq(0, 4), seq(10, 4)
    cache.insert([*a, *b])
    assert cache.lookup([*a, *a, *b]) == 4  # the first a hits, then a-after-a is new


def test_block_hashes_chain_their_parents() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    a, b = seq(0, 4), seq(10, 4)
    hashes_ab = cache.block_hashes([*a, *b])
    hashes_bb = cache.block_hashes([*b, *b])
    assert len(hashes_ab) == 2
    assert hashes_ab[0] == cache.block_hashes(a)[0]
    assert hashes_ab[1] != hashes_bb[0]  # same tokens, different prefix
    assert hashes_bb[0] != hashes_bb[1]  # same tokens, different position
    assert cache.block_hashes([*a, *b, 1, 2]) == hashes_ab  # the partial block has no hash


# ---------------------------------------------------------------- LRU eviction


def test_eviction_at_capacity_drops_the_least_recently_used_chain() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=16)  # 4 blocks
    old, new, newest = seq(0, 8), seq(100, 8), seq(200, 8)
    cache.insert(old)
    cache.insert(new)
    assert len(cache) == 4
    cache.insert(newest)
    assert len(cache) == 4
    assert cache.lookup(old) == 0
    assert cache.lookup(new) == 8
    assert cache.lookup(newest) == 8
    assert cache.stats.evicted_blocks == 2


def test_a_refreshed_chain_survives_eviction() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=16)
    old, new, newest = seq(0, 8), seq(100, 8), seq(200, 8)
    cache.insert(old)
    cache.insert(new)
    assert cache.lookup(old) == 8  # a hit refreshes the chain: `new` is now least recent
    cache.insert(newest)
    assert cache.lookup(old) == 8
    assert cache.lookup(new) == 0
    assert cache.lookup(newest) == 8


def test_reinserting_a_chain_refreshes_it() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=16)
    old, new, newest = seq(0, 8), seq(100, 8), seq(200, 8)
    cache.insert(old)
    cache.insert(new)
    cache.insert(old)
    cache.insert(newest)
    assert cache.lookup(old) == 8
    assert cache.lookup(new) == 0


def test_eviction_trims_a_chain_from_its_tail() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=24)  # 6 blocks
    long, other = seq(0, 16), seq(100, 8)  # 4 blocks and 2 blocks
    cache.insert(long)
    cache.insert(other)  # full
    cache.insert(seq(200, 4))  # one more block: one block of `long` goes
    assert cache.lookup(long) == 12  # its last block went, its root stayed
    cache.insert(seq(300, 4))  # now `other` is least recent: its tail goes
    assert cache.lookup(other) == 4
    assert cache.lookup(long) == 12


def test_a_parent_stays_more_recent_than_its_children() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=20)  # 5 blocks
    root = seq(0, 4)
    branch_a = [*root, *seq(10, 8)]  # root, a1, a2
    branch_b = [*root, *seq(20, 4)]  # root, b1
    cache.insert(branch_a)
    cache.insert(branch_b)  # the shared root is refreshed with b1
    cache.insert(seq(900, 4))  # 5 blocks: full
    for start in (910, 920, 930):  # each new block evicts one: a2, a1, b1; the root outlives them
        cache.insert(seq(start, 4))
    assert cache.lookup(branch_a) == 4
    assert cache.lookup(branch_b) == 4


def test_a_chain_longer_than_the_cache_keeps_its_head() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=16)
    tokens = seq(0, 40)
    cache.insert(tokens)
    assert len(cache) == 4
    assert cache.lookup(tokens) == 16


# ---------------------------------------------------------------- stats


def test_stats_count_lookups_hits_misses_and_evictions() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=16)
    assert cache.stats == CacheStats()
    cache.lookup(seq(0, 10))
    cache.insert(seq(0, 10))
    cache.lookup(seq(0, 10))
    assert cache.stats == CacheStats(lookups=2, hit_tokens=8, miss_tokens=12, evicted_blocks=0)
    cache.insert(seq(100, 12))
    assert cache.stats.evicted_blocks == 1
    assert cache.stats.lookups == 2  # inserting is not a lookup


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        PrefixCache(block_size=0)
    with pytest.raises(ValueError):
        PrefixCache(block_size=16, capacity_tokens=8)


# ---------------------------------------------------------------- properties

token_lists = st.lists(st.integers(0, 5), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(1, 12),
    st.lists(st.tuples(st.booleans(), token_lists), max_size=12),
    token_lists,
)
def test_lookup_is_a_block_multiple_within_the_prompt(
    block_size: int, capacity_blocks: int, ops: list[tuple[bool, list[int]]], probe: list[int]
) -> None:
    cache = PrefixCache(block_size=block_size, capacity_tokens=block_size * capacity_blocks)
    inserted: list[list[int]] = []
    for is_insert, tokens in [*ops, (False, probe)]:
        if is_insert:
            cache.insert(tokens)
            inserted.append(tokens)
            continue
        hit = cache.lookup(tokens)
        assert 0 <= hit <= len(tokens)
        assert hit % block_size == 0
        assert hit <= capacity_blocks * block_size
        # a hit is a prefix some inserted prompt had (hashes aside, the cache only holds those)
        assert hit == 0 or any(t[:hit] == tokens[:hit] for t in inserted)
    assert len(cache) <= capacity_blocks


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), token_lists, token_lists)
def test_a_roomy_cache_hits_the_longest_shared_full_block_prefix(
    block_size: int, first: list[int], second: list[int]
) -> None:
    cache = PrefixCache(block_size=block_size, capacity_tokens=block_size * 100)
    cache.insert(first)
    shared = 0
    while shared < min(len(first), len(second)) and first[shared] == second[shared]:
        shared += 1
    assert cache.lookup(second) == shared // block_size * block_size


# ---------------------------------------------------------------- the old rule as an oracle


class FullRefreshLRU:
    """The rule the cache keeps, done the slow way: every use moves its whole chain to the
    most recent end (tail first, root last) and eviction pops the least recent block."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.cache = PrefixCache(block_size, block_size * capacity_blocks)  # for block_hashes only
        self.capacity_blocks = capacity_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.evicted = 0

    def _refresh(self, hashes: list[int]) -> None:
        for block in reversed(hashes):
            self.blocks.move_to_end(block)

    def lookup(self, tokens: list[int]) -> int:
        hits = []
        for block in self.cache.block_hashes(tokens):
            if block not in self.blocks:
                break
            hits.append(block)
        self._refresh(hits)
        return len(hits) * self.cache.block_size

    def insert(self, tokens: list[int]) -> None:
        hashes = self.cache.block_hashes(tokens)
        for block in hashes:
            self.blocks.setdefault(block, None)
        self._refresh(hashes)
        while len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)
            self.evicted += 1


branching = st.lists(st.integers(0, 2), max_size=24)  # few symbols: chains share prefixes often


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(1, 10), st.lists(st.tuples(st.booleans(), branching), max_size=30))
def test_the_cache_evicts_exactly_as_a_full_refresh_lru_would(
    block_size: int, capacity_blocks: int, ops: list[tuple[bool, list[int]]]
) -> None:
    cache = PrefixCache(block_size=block_size, capacity_tokens=block_size * capacity_blocks)
    oracle = FullRefreshLRU(block_size, capacity_blocks)
    for is_insert, tokens in ops:
        if is_insert:
            cache.insert(tokens)
            oracle.insert(tokens)
        else:
            assert cache.lookup(tokens) == oracle.lookup(tokens)
        assert len(cache) == len(oracle.blocks)
        assert cache.stats.evicted_blocks == oracle.evicted
    for _, tokens in ops:  # what is cached at the end, chain by chain (probes refresh both alike)
        assert cache.lookup(tokens) == oracle.lookup(tokens)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.lists(st.tuples(branching, branching), min_size=1, max_size=12))
def test_known_hashes_and_a_tail_give_the_answers_of_the_whole_prompt(
    block_size: int, turns: list[tuple[list[int], list[int]]]
) -> None:
    """A growing conversation passed with its known hashes and a generation-prompt tail is
    looked up and inserted exactly as the whole prompt would be."""
    cheap = PrefixCache(block_size=block_size, capacity_tokens=block_size * 6)
    whole = PrefixCache(block_size=block_size, capacity_tokens=block_size * 6)
    tokens: list[int] = []
    known: list[int] = []
    for added, tail in turns:
        tokens += added
        assert cheap.lookup(tokens, known, tail=tail) == whole.lookup(tokens + tail)
        cheap.insert(tokens, known, tail=tail)
        whole.insert(tokens + tail)
        known += cheap.insert(tokens, known)  # retain: the hashes after the known ones
        whole.insert(tokens)
        assert known == cheap.block_hashes(tokens)
        assert len(cheap) == len(whole)


# ---------------------------------------------------------------- work per use


def test_a_growing_conversation_costs_only_its_growth() -> None:
    """With its known hashes, each turn hashes only its new blocks and touches a fixed number of
    entries plus the new blocks: the same on turn 100 as on turn 2 (counts, not time)."""
    cache = PrefixCache(block_size=16, capacity_tokens=1_000_000)
    tokens: list[int] = []
    known: list[int] = []
    per_turn: list[tuple[int, int]] = []
    for turn in range(100):
        tokens += seq(turn * 1000, 160)  # 10 new blocks a turn
        work = CacheWork()
        cached = cache.lookup(tokens, known, tail=[7, 8], work=work)
        assert cached == len(known) * 16  # everything retained last turn, and nothing more
        cache.insert(tokens, known, tail=[7, 8], work=work)
        known += cache.insert(tokens, known, work=work)
        per_turn.append((work.hashed_blocks, work.touched_blocks))
    assert len(tokens) == 16_000
    assert {hashed for hashed, _ in per_turn[1:]} == {30}  # 10 new blocks, hashed 3 times
    assert max(touched for _, touched in per_turn[1:]) <= 3 * (10 + 3)


def test_without_known_hashes_a_lookup_probes_a_logarithmic_number_of_blocks() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=100_000)
    tokens = seq(0, 4096)  # 1,024 blocks
    cache.insert(tokens)
    work = CacheWork()
    changed = [*tokens[:2000], -1, *tokens[2001:]]  # differs inside block 500
    assert cache.lookup(changed, work=work) == 2000
    assert work.hashed_blocks == 1024
    assert work.touched_blocks <= 2 + 11  # the tail, a binary search, the refresh


def test_the_stale_heap_is_rebuilt_and_stays_bounded() -> None:
    cache = PrefixCache(block_size=4, capacity_tokens=64)
    tokens = seq(0, 8)
    cache.insert(tokens)
    for _ in range(5000):  # every use leaves one stale entry behind
        assert cache.lookup(tokens) == 8
    assert len(cache._leaves) <= 2 * len(cache) + 1025
