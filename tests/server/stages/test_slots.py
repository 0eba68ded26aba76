"""A replica's engine slots, shared between keys (``labkit.server.stages.slots``), in process.

What is asserted is which key gets each slot: keys take turns for freed slots whatever each has
waiting, a key never holds more than its share while another key could use a slot, nothing is
left waiting beside a free slot it may take, and a cancelled waiter gives back what it was
given. Nothing here is timed.
"""

from __future__ import annotations

import asyncio

from labkit.server.stages.slots import EngineSlots, default_share


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(scenario: object) -> object:
    return asyncio.run(scenario())  # type: ignore[operator]


def test_freed_slots_go_to_the_keys_in_turn_not_to_the_oldest_waiters() -> None:
    async def scenario() -> list[str]:
        slots, order = EngineSlots(capacity=1), []

        async def respond(owner: str) -> None:
            await slots.acquire(owner)
            order.append(owner)

        await slots.acquire("greedy")
        tasks = [asyncio.create_task(respond(owner)) for owner in ["greedy"] * 3 + ["learner", "other"]]
        await settle()
        for _ in tasks:
            slots.release(order[-1] if order else "greedy")
            await settle()
        await asyncio.gather(*tasks)
        return order

    # The greedy key asked three times first; the others still get the next slots.
    assert run(scenario) == ["learner", "other", "greedy", "greedy", "greedy"]


def test_a_key_holds_at_most_its_share_and_the_rest_stay_free_for_others() -> None:
    async def scenario() -> tuple[int, int, bool, bool]:
        slots = EngineSlots(capacity=4, share=2)
        waits = [asyncio.create_task(slots.acquire("greedy")) for _ in range(10)]
        await settle()
        greedy_held = slots.held["greedy"]
        learner_waited = await slots.acquire("learner")
        slots.release("greedy")  # one of its slots frees: its next waiter takes it, within its share
        await settle()
        done = sum(task.done() for task in waits)
        for task in waits:
            task.cancel()
        return greedy_held, done, learner_waited, slots.may_take("other")

    greedy_held, granted, learner_waited, other_may = run(scenario)
    assert greedy_held == 2 and granted == 3  # two at once, then one more as one is given back
    assert learner_waited is False and other_may is True


def test_without_a_share_one_key_may_take_every_slot() -> None:
    async def scenario() -> tuple[int, bool]:
        slots = EngineSlots(capacity=3)
        for _ in range(3):
            await slots.acquire("solo")
        return slots.held["solo"], slots.may_take("learner")

    assert run(scenario) == (3, False)


def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    async def scenario() -> tuple[int, int]:
        slots = EngineSlots(capacity=1)
        await slots.acquire("a")
        waiting = asyncio.create_task(slots.acquire("b"))
        granted_then_cancelled = asyncio.create_task(slots.acquire("c"))
        await settle()
        waiting.cancel()  # cancelled while it waits
        await settle()
        slots.release("a")  # granted to "c" ...
        granted_then_cancelled.cancel()  # ... which is cancelled before it runs: it gives it back
        await settle()
        return slots.busy, len(slots.held)

    assert run(scenario) == (0, 0)


def test_the_default_share_is_a_quarter_of_a_replica_where_keys_are_required() -> None:
    assert default_share(32, keys_required=True) == 8
    assert default_share(8, keys_required=True) == 2 and default_share(2, keys_required=True) == 1
    assert default_share(32, keys_required=False) is None
