"""The inference stages: a replica's slot, the prompt it reads, the output it samples.

    queue         waiting for a slot on the replica (held through prefill and decode)
    prefill       the prompt tokens the replica's prefix cache lacks
    decode        sampling, paced at the model's speed, each chunk an event

They are methods of ``labkit.server.pipeline.Pipeline``; ``labkit.server.responder.infer``
runs them for a response, ``labkit.server.compact`` for a compaction pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache

from labkit.api.events import Event, ResponseEvents
from labkit.api.ids import new_id, new_item_id
from labkit.api.stages import Stage
from labkit.engine.policies import Action, Call
from labkit.engine.render import GENERATION_PROMPT
from labkit.server.slots import EngineSlots
from labkit.server.turn import Turn
from labkit.text.tokenizer import decode, encode_text

Emit = Callable[[Event], Awaitable[None]]


class Sampling:
    """The inference stages (see the module's docstring)."""

    slots: dict[str, EngineSlots]  # per replica: the responses it serves at once, shared by keys

    @asynccontextmanager
    async def queue(self, turn: Turn) -> AsyncIterator[None]:
        """A slot on the turn's replica, held until the block ends. The span says how busy the
        replica was and how many of its slots the turn's key held when it asked, and whether it
        waited (for a free slot, or for its key's share: ``labkit.server.slots``)."""
        assert turn.replica is not None
        slots = self.slots[turn.replica.name]
        with turn.trace.stage(Stage.QUEUE) as span:
            span.detail.update(busy=slots.busy, held_by_key=slots.held[turn.owner])
            span.detail["waited"] = await slots.acquire(turn.owner)
        try:
            yield
        finally:
            slots.release(turn.owner)

    async def prefill(self, turn: Turn) -> None:
        """The replica reads the prompt: the rendered conversation and the assistant's turn opener."""
        model, replica, buffer = turn.model, turn.replica, turn.buffer
        assert model is not None and replica is not None and buffer is not None
        with turn.trace.stage(Stage.PREFILL) as span:
            prefill = await replica.prefill(model, buffer.ids, buffer.block_hashes, tail=GENERATION_PROMPT)
            span.tokens, span.detail["cached_tokens"] = prefill.uncached_tokens, prefill.cached_tokens
            span.detail["hashed_blocks"] = prefill.work.hashed_blocks
            span.detail["touched_blocks"] = prefill.work.touched_blocks
        turn.prompt_tokens += prefill.prompt_tokens
        turn.cached_tokens += prefill.cached_tokens

    async def decode(self, turn: Turn, events: ResponseEvents, actions: Sequence[Action], emit: Emit) -> bool:
        """Sample the actions' tokens, each chunk an event through ``emit``; True if
        ``max_output_tokens`` cut them short."""
        with turn.trace.stage(Stage.DECODE) as span:
            before = turn.produced
            truncated = await _sample(turn, events, actions, emit)
            span.tokens, span.items = turn.produced - before, len(actions)
        return truncated


async def _sample(turn: Turn, events: ResponseEvents, actions: Sequence[Action], emit: Emit) -> bool:
    """Every action's tokens on one decode clock; True if max_output_tokens cut it."""
    assert turn.req is not None and turn.replica is not None and turn.model is not None
    budget = turn.req.max_output_tokens
    clock = turn.replica.decode(turn.model)
    for action in actions:
        if isinstance(action, Call):
            opening = events.begin_call(new_item_id("function_call"), new_id("call"), action.name)
            body = action.arguments
        else:
            opening = events.begin_message(new_item_id("message"))
            body = action.text
        for event in opening:
            await emit(event)
        ids = answer_ids(body)
        room = len(ids) if budget is None else max(0, budget - turn.produced)
        sampled = ids[:room]
        async for chunk in clock.pace(sampled):
            await emit(events.delta(decode(chunk)))
        turn.produced += len(sampled)
        turn.output_ids.append(list(sampled))
        truncated = len(sampled) < len(ids)
        for event in events.end_item("incomplete" if truncated else "completed"):
            await emit(event)
        if truncated:
            return True
    return False


@lru_cache(maxsize=16)
def answer_ids(text: str) -> tuple[int, ...]:
    """The ids of an answer the simulated model gives. A real engine hands the API service the
    tokens it sampled; the simulation tokenizes the text its policy chose instead, once per
    distinct answer (answers repeat: a room runs the same scenario, asks for the same lengths),
    so the server's CPU per turn is the service's, not the simulation's. The 16 most recent
    answers are kept."""
    return tuple(encode_text(text))
