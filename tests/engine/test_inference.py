"""One engine replica: prefill what its prefix cache lacks, spend the model's time for it, decode.

In process. The time a replica spends is read off the sleeps it asks for (recorded instead of
slept), and what it prefilled off its cache's counts: the mechanism, never the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from labkit.engine import timing
from labkit.engine.catalogue import ModelSpec
from labkit.engine.inference import Prefill, Replica
from labkit.engine.prefix_cache import PrefixCache

MODEL = ModelSpec("labkit-test", decode_tps=1000.0, prefill_tps=20_000.0)
BLOCK = 16
TAIL = [7, 8]  # what follows the conversation in a prompt (the generation prompt)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The sleeps asked of the modeled clock, recorded instead of slept."""
    asked: list[float] = []

    async def record(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(timing, "sleep", record)
    yield asked


def prefill(replica: Replica, tokens: list[int], known: list[int] | None = None) -> Prefill:
    return asyncio.run(replica.prefill(MODEL, tokens, known or [], tail=TAIL))


def test_a_cold_prompt_is_prefilled_whole(slept: list[float]) -> None:
    done = prefill(Replica("replica-0", PrefixCache(BLOCK, 4096)), list(range(100)))
    assert (done.prompt_tokens, done.cached_tokens, done.uncached_tokens) == (102, 0, 102)
    assert slept == [done.seconds] == [MODEL.prefill_seconds(102)]


def test_a_follow_up_prefills_only_what_the_cache_lacks(slept: list[float]) -> None:
    replica = Replica("replica-0", PrefixCache(BLOCK, 4096))
    turn = list(range(100))
    prefill(replica, turn)
    finished = turn + list(range(500, 520))  # the prompt and the output sampled for it
    hashes = replica.retain(finished)
    assert len(hashes) == 120 // BLOCK  # every full block, none known before
    follow_up = prefill(replica, finished + list(range(900, 930)), hashes)
    assert follow_up.cached_tokens == 7 * BLOCK  # the retained blocks, whole
    assert follow_up.uncached_tokens == 152 - 7 * BLOCK
    assert follow_up.work.hashed_blocks == 2 * 2  # only the new blocks, for lookup and insert
    assert slept[-1] == MODEL.prefill_seconds(follow_up.uncached_tokens)


def test_a_fully_cached_prompt_spends_no_prefill_time(slept: list[float]) -> None:
    replica = Replica("replica-0", PrefixCache(BLOCK, 4096))
    prompt = list(range(2 * BLOCK - len(TAIL)))  # with the tail: exactly two full blocks
    prefill(replica, prompt)
    again = prefill(replica, prompt)
    assert (again.cached_tokens, again.seconds) == (2 * BLOCK, 0)
    assert len(slept) == 1  # nothing to wait for: no sleep asked at all


def test_each_replica_has_its_own_cache(slept: list[float]) -> None:
    one, other = (Replica(f"replica-{i}", PrefixCache(BLOCK, 4096)) for i in range(2))
    prompt = list(range(64))
    prefill(one, prompt)
    assert prefill(one, prompt).cached_tokens == 64
    assert prefill(other, prompt).cached_tokens == 0


def test_a_replica_keeps_the_cache_it_is_given_even_empty() -> None:
    empty = PrefixCache(BLOCK, 4096)  # no blocks yet: falsy, and still the one to use
    assert Replica("replica-0", empty).cache is empty
    assert isinstance(Replica().cache, PrefixCache)


def test_decode_paces_at_the_models_speed() -> None:
    clock = Replica().decode(MODEL)
    assert clock.tps == MODEL.decode_tps
    assert clock.deadline(999) - clock.start == pytest.approx(1.0)  # the 1000th token, one second in
