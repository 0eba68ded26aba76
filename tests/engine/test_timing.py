"""Precise sleeps on a coarse timer: the engine's decode clock and the server's modeled hops keep
their length where the OS timer ticks every 15.6 ms (Windows' default), simulated here.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from labkit.engine import timing
from labkit.engine.clock import DecodeClock, Pacing
from labkit.server.stores.billing import Billing, Charge

pytestmark = pytest.mark.slow  # timing precision on a coarse timer

TICK_S = 0.0156  # Windows' default system timer period


class CoarseSelector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
    """Waits as Windows does: a timeout ends on the next tick, never sooner. Notes every timed
    wait as (when it began, how long it lasts), so a test can see what the loop asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[float, float]] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            timeout = math.ceil(timeout / TICK_S - 1e-9) * TICK_S
            self.waits.append((time.perf_counter(), timeout))
        return super().select(timeout)


def coarse_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(CoarseSelector())


def run_coarse(main: Callable[[], Awaitable[Any]]) -> Any:
    with asyncio.Runner(loop_factory=coarse_loop) as runner:
        return runner.run(main())


def selector() -> CoarseSelector:
    chosen = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    assert isinstance(chosen, CoarseSelector)
    return chosen


async def fastest(sleep: Callable[[float], Awaitable[None]], seconds: float, times: int = 7) -> float:
    """The shortest of several sleeps: a busy machine only ever makes one longer."""
    durations = []
    for _ in range(times):
        start = time.perf_counter()
        await sleep(seconds)
        durations.append(time.perf_counter() - start)
    return min(durations)


async def waits_past_deadline(sleep: Callable[[float], Awaitable[None]], seconds: float) -> list[float]:
    """By how much each timed wait of the loop during ``sleep(seconds)`` outlasts its deadline."""
    waits = selector().waits
    waits.clear()
    deadline = time.perf_counter() + seconds
    await sleep(seconds)
    return [began + lasts - deadline for began, lasts in waits if began + lasts > deadline + 1e-4]


# ---------------------------------------------------------------- a coarse timer, simulated


def test_the_simulated_coarse_timer_stretches_a_plain_sleep_to_a_tick() -> None:
    async def main() -> tuple[float, list[float], list[float]]:
        short = await fastest(asyncio.sleep, 0.004)
        return (
            short,
            await waits_past_deadline(asyncio.sleep, 0.004),
            await waits_past_deadline(asyncio.sleep, 0.012),
        )

    short, past_short, past_long = run_coarse(main)
    assert short >= TICK_S - 0.0005  # a 4 ms sleep takes a whole tick
    assert past_short and past_long  # and both a 4 ms and a 12 ms one wait past their deadline


def test_calibration_finds_the_coarse_timer() -> None:
    async def main() -> float:
        return await timing.calibrate()

    assert timing.is_coarse(run_coarse(main))


@pytest.mark.parametrize("seconds", [0.004, 0.012, 0.040])
def test_a_precise_sleep_never_waits_on_the_timer_past_its_deadline(seconds: float) -> None:
    async def main() -> list[float]:
        await timing.calibrate()
        return await waits_past_deadline(timing.sleep, seconds)

    assert run_coarse(main) == []


def test_precise_sleeps_keep_their_length_on_a_coarse_timer() -> None:
    async def main() -> tuple[float, float, float]:
        await timing.calibrate()
        short, long = await fastest(timing.sleep, 0.004), await fastest(timing.sleep, 0.012)
        return short, long, await fastest(timing.sleep, 0.040, times=3)

    short, long, longer = run_coarse(main)
    assert 0.004 <= short < TICK_S  # less than the tick a plain sleep takes
    assert short < long and long >= 0.012  # the two hops stay apart, in order, as the lesson needs
    assert 0.040 <= longer < 0.040 + TICK_S  # longer than a tick: the timer, then yields


def test_other_tasks_run_while_a_precise_sleep_finishes() -> None:
    async def main() -> int:
        await timing.calibrate()
        turns = 0

        async def other() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await timing.sleep(0.004)
        task.cancel()
        return turns

    assert run_coarse(main) > 1


def test_the_decode_clock_wakes_for_each_token_on_a_coarse_timer() -> None:
    async def main() -> tuple[list[int], list[float], list[float]]:
        await timing.calibrate()
        clock = DecodeClock(250.0, pacing=Pacing())  # a token every 4 ms, a quarter of a tick
        waits = selector().waits
        waits.clear()
        chunks = [len(chunk) async for chunk in clock.pace(list(range(10)))]
        return chunks, [clock.deadline(i) for i in range(10)], list(waits)

    chunks, deadlines, waits = run_coarse(main)
    assert sum(chunks) == 10
    for began, lasts in waits:  # no wait on the timer outlasts the token it waits for
        due = min(d for d in deadlines if d >= began)
        assert began + lasts <= due + 1e-4


def test_the_servers_modeled_hops_keep_their_length_on_a_coarse_timer() -> None:
    class Ledger:
        async def write(self, charges: list[Charge]) -> None:
            pass

    charge = Charge("resp_1", "key", "labkit-spark", 10, 0, 5, "completed")
    billing = Billing(Ledger(), hop_s=0.004)  # type: ignore[arg-type]

    async def billing_hop(seconds: float) -> None:
        await billing.charge(charge)

    async def main() -> tuple[list[float], float, float]:
        await timing.calibrate()
        past = await waits_past_deadline(timing.sleep, 0.004)
        past += await waits_past_deadline(billing_hop, 0.004)
        hop, long_hop = (
            await fastest(timing.sleep, 0.004),
            await fastest(timing.sleep, 0.012),
        )
        return past, hop, long_hop

    past, hop, long_hop = run_coarse(main)
    assert past == []
    assert hop < long_hop  # a 4 ms hop no longer takes the same tick as a 12 ms one


def test_a_fine_timer_sleeps_once_and_never_spins(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(seconds)

    async def main() -> None:
        await timing.calibrate()
        monkeypatch.setattr(timing, "is_coarse", lambda step: False)
        monkeypatch.setattr(asyncio, "sleep", recording_sleep)
        await timing.sleep(0.005)

    asyncio.run(main())
    assert slept and slept[0] == 0.005 and 0.0 not in slept


def test_an_early_wake_up_sleeps_again_until_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {"t": 0.0}
    slept: list[float] = []

    async def early_sleep(seconds: float) -> None:  # asyncio may fire a timer a resolution early
        slept.append(seconds)
        fake["t"] += seconds / 2 if len(slept) == 1 else seconds

    async def main() -> None:
        await timing.calibrate()
        monkeypatch.setattr(timing, "is_coarse", lambda step: False)
        monkeypatch.setattr(asyncio, "sleep", early_sleep)
        await timing.sleep(0.010, now=lambda: fake["t"])

    asyncio.run(main())
    assert fake["t"] >= 0.010 and slept == [0.010, 0.005]


def test_nothing_to_wait_for_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """No timer and no yield: a zero or negative wait never reaches the loop."""
    slept: list[float] = []

    async def recorded(seconds: float) -> None:
        slept.append(seconds)

    async def main() -> None:
        monkeypatch.setattr(asyncio, "sleep", recorded)
        await timing.sleep(0.0)
        await timing.sleep(-1.0)

    asyncio.run(main())
    assert slept == []
