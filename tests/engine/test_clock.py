"""The decode clock, in fake time, at the speed a catalogue model sets.

Deadlines are computed from the start, so a late wake-up catches up in one chunk.

No test sleeps for real: ``DecodeClock`` reads an injected ``now``, and the
``asyncio.sleep`` it awaits is replaced (for one test, by pytest's monkeypatch)
with one that advances the fake time instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import pytest

from labkit.engine import clock as clock_module
from labkit.engine.catalogue import load_catalogue
from labkit.engine.clock import DecodeClock, Pacing, due_count

EPS = 1e-9  # float rounding of t0 + i / tps, far below a token's interval at any tested speed


@dataclass
class FakeTime:
    """A clock that moves only when slept on; ``lag`` models a loop that wakes late (or early)."""

    t: float = 1000.0
    lag: Callable[[int, float], float] = lambda call, wait: 0.0
    sleeps: list[float] = field(default_factory=list)

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds + self.lag(len(self.sleeps), seconds)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    time = FakeTime()
    monkeypatch.setattr(clock_module.asyncio, "sleep", time.sleep)
    return time


def run(clock: DecodeClock, tokens: list[int], fake: FakeTime) -> list[tuple[float, list[int]]]:
    """Drain ``pace`` and note the fake time each chunk was released at."""

    async def drain() -> list[tuple[float, list[int]]]:
        return [(fake.now(), list(chunk)) async for chunk in clock.pace(tokens)]

    return asyncio.run(drain())


def release_times(chunks: list[tuple[float, list[int]]]) -> list[float]:
    """The release time of every token, in order."""
    return [t for t, chunk in chunks for _ in chunk]


# ---------------------------------------------------------------- the schedule


def test_due_count_counts_tokens_whose_deadline_passed() -> None:
    assert due_count(start=0.0, tps=1000.0, now=0.0105) == 10
    assert due_count(start=0.0, tps=1000.0, now=0.0) == 0
    assert due_count(start=5.0, tps=1000.0, now=4.0) == 0  # never negative
    assert due_count(start=0.0, tps=65.0, now=1.0) == 65
    assert due_count(start=0.0, tps=4000.0, now=3 / 4000) == 3  # exactly at a deadline counts


def test_deadlines_are_computed_from_the_start() -> None:
    fake = FakeTime(t=10.0)
    clock = DecodeClock(100.0, now=fake.now)
    assert clock.start == 10.0
    assert [clock.deadline(i) for i in (0, 1, 99)] == pytest.approx([10.01, 10.02, 11.0])


def test_a_non_positive_speed_is_rejected() -> None:
    with pytest.raises(ValueError):
        DecodeClock(0.0, now=lambda: 0.0)


# ---------------------------------------------------------------- pace, on time


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_pace_yields_every_token_in_order(fake: FakeTime, tps: float) -> None:
    tokens = list(range(300))
    chunks = run(DecodeClock(tps, now=fake.now), tokens, fake)
    assert [tok for _, chunk in chunks for tok in chunk] == tokens


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_no_token_is_released_before_its_deadline(fake: FakeTime, tps: float) -> None:
    clock = DecodeClock(tps, now=fake.now)
    times = release_times(run(clock, list(range(500)), fake))
    for i, t in enumerate(times):
        assert t >= clock.deadline(i) - EPS
        assert t - clock.deadline(i) < EPS  # a loop that wakes on time releases each token on time


def test_a_punctual_loop_releases_one_token_per_wake_up(fake: FakeTime) -> None:
    chunks = run(DecodeClock(1000.0, now=fake.now), list(range(50)), fake)
    assert [len(chunk) for _, chunk in chunks] == [1] * 50
    assert len(fake.sleeps) == 50


def test_pace_on_no_tokens_yields_nothing(fake: FakeTime) -> None:
    assert run(DecodeClock(1000.0, now=fake.now), [], fake) == []
    assert fake.sleeps == []


def test_one_clock_spans_several_items(fake: FakeTime) -> None:
    clock = DecodeClock(1000.0, now=fake.now)
    first = release_times(run(clock, list(range(10)), fake))
    second = release_times(run(clock, list(range(5)), fake))
    assert clock.released == 15
    for i, t in enumerate(first + second):
        assert clock.deadline(i) - EPS <= t < clock.deadline(i) + EPS


# ---------------------------------------------------------------- pace, waking late


def test_a_late_wake_up_sends_everything_due_in_one_chunk(fake: FakeTime) -> None:
    tps = 1000.0
    fake.lag = lambda call, wait: 0.0505 if call == 3 else 0.0  # the third sleep overruns by 50.5 ms
    clock = DecodeClock(tps, now=fake.now)
    chunks = run(clock, list(range(200)), fake)
    sizes = [len(chunk) for _, chunk in chunks]
    assert sizes[:3] == [1, 1, 51]  # token 2 was due, and 50 more came due during the stall
    assert set(sizes[3:]) == {1}  # then back on schedule: deadlines never moved
    for i, t in enumerate(release_times(chunks)):
        assert t >= clock.deadline(i) - EPS


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_a_loop_that_always_wakes_late_releases_all_due_tokens_each_time(fake: FakeTime, tps: float) -> None:
    fake.lag = lambda call, wait: 0.004  # every wake-up is 4 ms late (16 token intervals at 4,000/s)
    clock = DecodeClock(tps, now=fake.now)
    tokens = list(range(400))
    chunks = run(clock, tokens, fake)
    released = 0
    for t, chunk in chunks:
        released += len(chunk)
        assert released == min(len(tokens), due_count(clock.start, tps, t))  # all that is due, no more
    assert released == len(tokens)
    if tps >= 1000:
        assert max(len(chunk) for _, chunk in chunks) > 1
    # lateness never accumulates: the final token goes out at most one lag after its deadline
    assert chunks[-1][0] - clock.deadline(len(tokens) - 1) <= 0.004 + 1 / tps + EPS


# ---------------------------------------------------------------- the rate a client sees


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_the_rate_matches_the_model_speed_exactly(fake: FakeTime, tps: float) -> None:
    clock = DecodeClock(tps, now=fake.now)
    n = 2000
    chunks = run(clock, list(range(n)), fake)
    first, last = chunks[0][0], chunks[-1][0]
    # the tokens after the first delta arrive over (last - first) seconds
    assert (n - len(chunks[0][1])) / (last - first) == pytest.approx(tps, rel=1e-9)
    assert n / (last - clock.start) == pytest.approx(tps, rel=1e-9)


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_the_rate_holds_when_the_loop_wakes_late(fake: FakeTime, tps: float) -> None:
    fake.lag = lambda call, wait: 0.0013 * (call % 3)  # jitter: 0, 1.3 or 2.6 ms late
    clock = DecodeClock(tps, now=fake.now)
    n = 4000
    run(clock, list(range(n)), fake)
    assert clock.released == n
    # the last token is late by at most the jitter, so the average rate is tps to within it
    assert n / (fake.now() - clock.start) == pytest.approx(tps, rel=0.0026 * tps / n + 1e-9)


# ---------------------------------------------------------------- waking early


def test_an_early_wake_up_does_not_release_a_token_before_its_deadline(fake: FakeTime) -> None:
    # asyncio fires a timer up to one clock resolution early; the clock must sleep again
    fake.lag = lambda call, wait: -wait / 2 if call == 1 else 0.0  # the first sleep returns halfway
    clock = DecodeClock(1000.0, now=fake.now)
    chunks = run(clock, list(range(5)), fake)
    assert [len(chunk) for _, chunk in chunks] == [1] * 5
    for i, t in enumerate(release_times(chunks)):
        assert t >= clock.deadline(i) - EPS
    assert len(fake.sleeps) == 6  # one extra sleep for the early wake-up


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
def test_a_loop_that_always_wakes_early_still_keeps_every_deadline(fake: FakeTime, tps: float) -> None:
    fake.lag = lambda call, wait: -0.5 * wait if call % 2 else 0.0  # every other sleep returns halfway
    clock = DecodeClock(tps, now=fake.now)
    chunks = run(clock, list(range(100)), fake)
    for i, t in enumerate(release_times(chunks)):
        assert t >= clock.deadline(i) - EPS
    assert [tok for _, chunk in chunks for tok in chunk] == list(range(100))


# ---------------------------------------------------------------- under load: fewer, larger deltas


@pytest.mark.parametrize(("others", "tps"), [(63, 1000.0), (31, 4000.0), (7, 1000.0)])
def test_under_load_deltas_are_spaced_by_the_load_and_the_rate_holds(
    fake: FakeTime, others: int, tps: float
) -> None:
    pacing = Pacing(max_deltas_per_s=8000.0)
    pacing.active = others  # responses decoding beside this one
    clock = DecodeClock(tps, now=fake.now, pacing=pacing)
    n = 3000
    chunks = run(clock, list(range(n)), fake)
    assert [tok for _, chunk in chunks for tok in chunk] == list(range(n))
    spacing = (others + 1) / 8000.0
    times = [t for t, _ in chunks]
    assert times[0] == pytest.approx(clock.deadline(0))  # the first token is not held back ...
    assert times[-1] == pytest.approx(clock.deadline(n - 1))  # ... nor the last
    gaps = [b - a for a, b in pairwise(times)]
    assert min(gaps[:-1]) >= spacing - EPS  # the last gap may be shorter: the item ends on time
    for i, t in enumerate(release_times(chunks)):
        assert t >= clock.deadline(i) - EPS  # still never early
    assert len(chunks) <= n / (spacing * tps) + 2
    assert (n - len(chunks[0][1])) / (times[-1] - times[0]) == pytest.approx(tps, rel=1e-9)
    assert pacing.active == others  # this clock counted itself only while it ran


def test_under_load_streams_release_on_one_shared_grid(fake: FakeTime) -> None:
    """Streams that started at different moments release at the same instants, so the event
    loop wakes once for all of them (not once per stream)."""
    pacing = Pacing(max_deltas_per_s=8000.0)
    pacing.active = 63
    interval = 64 / 8000.0
    releases = []
    for start in (1000.0, 1000.0037):  # two streams, out of phase
        fake.t = start
        clock = DecodeClock(1000.0, now=fake.now, pacing=pacing)
        times = [t for t, _ in run(clock, list(range(500)), fake)]
        middle = times[1:-1]  # the first and last go out when their tokens are due
        assert all(abs(t / interval - round(t / interval)) < 1e-6 for t in middle)
        releases.append({round(t / interval) for t in middle})
    assert len(releases[0] & releases[1]) > 50  # the same grid points


def test_a_lone_stream_is_never_held_back(fake: FakeTime) -> None:
    clock = DecodeClock(4000.0, now=fake.now, pacing=Pacing(max_deltas_per_s=8000.0))
    chunks = run(clock, list(range(100)), fake)
    assert [len(chunk) for _, chunk in chunks] == [1] * 100  # 8,000 deltas/s is above 4,000 tokens/s


def test_a_stream_that_stops_early_stops_counting(fake: FakeTime) -> None:
    pacing = Pacing()
    clock = DecodeClock(1000.0, now=fake.now, pacing=pacing)

    async def stop_after_one() -> None:
        stream = clock.pace(list(range(10)))
        async for _ in stream:
            assert pacing.active == 1
            break
        await stream.aclose()

    asyncio.run(stop_after_one())
    assert pacing.active == 0


# ---------------------------------------------------------------- a catalogue model's speed


def test_a_clock_paces_at_the_models_speed(no_env_models: None, fake: FakeTime) -> None:
    burst = load_catalogue().resolve("labkit-burst")
    clock = DecodeClock(burst.decode_tps, now=fake.now)
    run(clock, list(range(4000)), fake)
    assert fake.now() - clock.start == pytest.approx(1.0)
