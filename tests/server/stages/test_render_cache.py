"""The sprint's render cache: prefix digests, longest-prefix lookup, eviction by the bytes held, and
the event loop's thread only."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Callable

from labkit.engine.render import PrefixHasher, TokenBuffer, prefix_digests
from labkit.server.stages.render_cache import ENTRY_BYTES, RenderCache, buffer_bytes
from labkit.text.tokenizer import encode_text

USER = {"type": "message", "role": "user", "content": "Fix the failing test."}
CALL = {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"}


def rendered(items: list[dict]) -> TokenBuffer:
    buffer = TokenBuffer.start("Be brief.", [])
    buffer.append(items)
    return buffer


def test_digests_name_prefixes_and_ignore_ids_and_status() -> None:
    digests = prefix_digests("h", [USER, CALL, OUTPUT])
    assert len(set(digests)) == 3
    replayed = {**CALL, "id": "fc_9", "status": "completed"}  # as clients replay it
    assert prefix_digests("h", [USER, replayed]) == digests[:2]
    assert prefix_digests("other system block", [USER]) != digests[:1]


def test_a_hasher_extended_in_steps_gives_the_same_digests() -> None:
    hasher = PrefixHasher("h")
    first = hasher.extend([USER])
    twin = hasher.copy()
    rest = hasher.extend([CALL, OUTPUT])
    assert first + rest == prefix_digests("h", [USER, CALL, OUTPUT])
    assert twin.extend([CALL]) == rest[:1]  # the copy went on from the same state
    assert (hasher.count, hasher.last) == (3, rest[-1])


def test_longest_prefix_returns_a_fork_and_how_many_items_it_covers() -> None:
    cache = RenderCache()
    short = rendered([USER])
    system = short.system_digest
    cache.put(prefix_digests(system, [USER])[-1], short)
    found, used = cache.longest_prefix(prefix_digests(system, [USER, CALL, OUTPUT]))
    assert used == 1 and found is not None and found.ids == short.ids
    found.append([CALL])
    assert cache.longest_prefix(prefix_digests(system, [USER]))[0].ids == short.ids  # not aliased
    assert cache.longest_prefix(prefix_digests(system, [CALL])) == (None, 0)


def test_eviction_keeps_the_bytes_held_under_the_capacity() -> None:
    buffers = [rendered([USER] * n) for n in (1, 2, 3)]
    cache = RenderCache(capacity_bytes=buffer_bytes(buffers[1]) + buffer_bytes(buffers[2]))
    for i, buffer in enumerate(buffers):
        cache.put(f"k{i}", buffer)
    assert cache.bytes == buffer_bytes(buffers[1]) + buffer_bytes(buffers[2]) <= cache.capacity_bytes
    assert cache.longest_prefix(["k0"]) == (None, 0)  # the least recently used went first
    assert cache.longest_prefix(["k2"])[1] == 1


def test_a_hit_is_the_most_recently_used() -> None:
    buffers = [rendered([USER] * n) for n in (1, 2, 3)]
    cache = RenderCache(capacity_bytes=buffer_bytes(buffers[1]) + buffer_bytes(buffers[2]))
    cache.put("k0", buffers[0])
    cache.put("k1", buffers[1])
    assert cache.longest_prefix(["k0"])[1] == 1
    cache.put("k2", buffers[2])  # room for two: k1, untouched since it was kept, goes
    assert [cache.longest_prefix([k])[1] for k in ("k0", "k1", "k2")] == [1, 0, 1]


def test_a_buffer_larger_than_the_cache_is_not_kept() -> None:
    big = rendered([USER] * 50)
    cache = RenderCache(capacity_bytes=buffer_bytes(big) - 1)
    cache.put("small", rendered([USER]))
    cache.put("big", big)
    assert cache.longest_prefix(["big"]) == (None, 0) and len(cache) == 1


def traced_bytes(make: Callable[[], object]) -> tuple[object, int]:
    """What ``make()`` returns, and the bytes it allocated that are still held."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        return made, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_bytes_counted_cover_what_entries_hold() -> None:
    """``buffer_bytes`` is an upper bound: for an entry's digest and bookkeeping (a fork shares the
    ids, so putting one allocates nothing else), and for ids a buffer holds on its own."""
    buffer = rendered([USER])
    cache = RenderCache()

    def fill() -> None:
        for i in range(2_000):
            cache.put(f"{i:064x}", buffer)  # digests as long as the real ones (sha256 hex)

    _, held = traced_bytes(fill)
    assert held <= 2_000 * ENTRY_BYTES
    text = "def handler(request):\n    return respond(request)\n" * 500
    own, held = traced_bytes(lambda: TokenBuffer(buffer.system_digest, ids=encode_text(text)))
    assert isinstance(own, TokenBuffer) and held <= buffer_bytes(own)


def test_only_the_thread_that_made_it_may_touch_it() -> None:
    cache = RenderCache()
    buffer = rendered([USER])
    errors: list[Exception] = []

    def elsewhere() -> None:
        for touch in (lambda: cache.put("k", buffer), lambda: cache.longest_prefix(["k"])):
            try:
                touch()
            except RuntimeError as exc:
                errors.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert len(errors) == 2 and "event loop" in str(errors[0])
    assert len(cache) == 0
    cache.put("k", buffer)  # its own thread may
    assert cache.longest_prefix(["k"])[1] == 1
