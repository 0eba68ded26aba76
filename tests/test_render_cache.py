"""The sprint's render cache: prefix keys, longest-prefix lookup, eviction by tokens held."""

from __future__ import annotations

from labkit.engine.render import TokenBuffer
from labkit.server.render_cache import PrefixHasher, RenderCache, prefix_keys

USER = {"type": "message", "role": "user", "content": "Fix the failing test."}
CALL = {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"}


def rendered(items: list[dict]) -> TokenBuffer:
    buffer = TokenBuffer.start("Be brief.", [])
    buffer.append(items)
    return buffer


def test_keys_name_prefixes_and_ignore_ids_and_status() -> None:
    keys = prefix_keys("h", [USER, CALL, OUTPUT])
    assert len(set(keys)) == 3
    replayed = {**CALL, "id": "fc_9", "status": "completed"}  # as clients replay it
    assert prefix_keys("h", [USER, replayed]) == keys[:2]
    assert prefix_keys("other header", [USER]) != keys[:1]


def test_a_hasher_extended_in_steps_gives_the_same_keys() -> None:
    hasher = PrefixHasher("h")
    first = hasher.extend([USER])
    twin = hasher.copy()
    rest = hasher.extend([CALL, OUTPUT])
    assert first + rest == prefix_keys("h", [USER, CALL, OUTPUT])
    assert twin.extend([CALL]) == rest[:1]  # the copy went on from the same state
    assert (hasher.count, hasher.last) == (3, rest[-1])


def test_longest_prefix_returns_a_fork_and_how_many_items_it_covers() -> None:
    cache = RenderCache()
    short = rendered([USER])
    cache.put(prefix_keys(short.key, [USER])[-1], short)
    found, used = cache.longest_prefix(prefix_keys(short.key, [USER, CALL, OUTPUT]))
    assert used == 1 and found is not None and found.ids == short.ids
    found.append([CALL])
    assert cache.longest_prefix(prefix_keys(short.key, [USER]))[0].ids == short.ids  # not aliased
    assert cache.longest_prefix(prefix_keys(short.key, [CALL])) == (None, 0)


def test_eviction_keeps_the_tokens_held_under_the_capacity() -> None:
    buffers = [rendered([USER] * n) for n in (1, 2, 3)]
    cache = RenderCache(capacity_tokens=len(buffers[1].ids) + len(buffers[2].ids))
    for i, buffer in enumerate(buffers):
        cache.put(f"k{i}", buffer)
    assert cache.tokens <= cache.capacity_tokens
    assert cache.longest_prefix(["k0"]) == (None, 0)  # the least recently used went first
    assert cache.longest_prefix(["k2"])[1] == 1
