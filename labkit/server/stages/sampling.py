"""The inference stages: a replica's slot, the prompt it reads, the output it samples.

    queue         waiting for a slot on the replica (held through prefill and decode)
    prefill       the prompt tokens the replica's prefix cache lacks
    decode        sampling, paced at the model's speed, each chunk an event

``queue`` is an object built with the replicas' slots; ``prefill`` and ``decode`` need nothing
but the run (its replica and model), so they are functions. ``labkit.server.stages.pipeline.Pipeline``
lists them; ``labkit.server.stages.responder.infer`` runs them for a response,
``labkit.server.stages.compaction_pass`` for a compaction pass. ``settle`` moves what was sampled
onto the rendered buffer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache

from labkit.api.events import Event, ResponseEvents
from labkit.api.ids import new_id, new_item_id
from labkit.api.stages import Stage
from labkit.engine.policies import Call, ModelAction, Say
from labkit.engine.render import GENERATION_PROMPT
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.slots import EngineSlots
from labkit.text.tokenizer import decode_text, encode_text

Emit = Callable[[Event], Awaitable[None]]


class Queue:
    """A slot on the run's replica, held until the ``async with`` block ends. The span says how
    busy the replica was and how many of its slots the run's key held when it asked, and whether
    it waited (for a free slot, or for its key's share: ``labkit.server.stages.slots``)."""

    def __init__(self, slots: dict[str, EngineSlots]) -> None:
        self.slots = slots  # per replica: the responses it serves at once, shared by keys

    @asynccontextmanager
    async def __call__(self, run: ResponseRun) -> AsyncIterator[None]:
        assert run.replica is not None
        slots = self.slots[run.replica.name]
        with run.trace.stage(Stage.QUEUE) as span:
            span.detail.update(busy=slots.busy, held_by_key=slots.held[run.owner])
            span.detail["waited"] = await slots.acquire(run.owner)
        try:
            yield
        finally:
            slots.release(run.owner)


async def prefill(run: ResponseRun) -> None:
    """The replica reads the prompt: the rendered conversation and the assistant's turn opener."""
    model, replica, buffer = run.model, run.replica, run.buffer
    assert model is not None and replica is not None and buffer is not None
    with run.trace.stage(Stage.PREFILL) as span:
        read = await replica.prefill(model, buffer.ids, buffer.block_hashes, tail=GENERATION_PROMPT)
        span.tokens, span.detail["cached_tokens"] = read.uncached_tokens, read.cached_tokens
        span.detail["hashed_blocks"] = read.work.hashed_blocks
        span.detail["touched_blocks"] = read.work.touched_blocks
    run.prompt_tokens += read.prompt_tokens
    run.cached_tokens += read.cached_tokens


async def decode(
    run: ResponseRun, events: ResponseEvents, actions: Sequence[ModelAction], emit: Emit
) -> str | None:
    """Sample the actions' tokens, each chunk an event through ``emit``; returns why sampling
    stopped early: ``max_output_tokens``, ``steered`` (``SAFE_BOUNDARIES``), or None."""
    with run.trace.stage(Stage.DECODE) as span:
        before = run.produced
        stopped = await _sample(run, events, actions, emit)
        span.tokens, span.items = run.produced - before, len(actions)
        if stopped:
            span.detail["stopped"] = stopped
    return stopped


def settle(run: ResponseRun) -> int:
    """Append the outputs sampled since the last settle to the rendered buffer (headers only), and
    make them part of the run's items; returns how many tokens that added. Render settles them
    before an appended rollout's next input, retain before the conversation is kept."""
    assert run.buffer is not None
    outputs, ids = run.unsettled()
    added = sum(run.buffer.append_sampled(item, sampled) for item, sampled in zip(outputs, ids, strict=True))
    run.appended += outputs
    run.settled = len(run.response["output"])
    return added


MAX_OUTPUT_TOKENS, STEERED = "max_output_tokens", "steered"  # why sampling stops early
SAFE_BOUNDARIES = """Where a response stops once steering input waits for it (its ``ResponseRun.stop``
is set): before an output item, and in a message's text right after a token that ends a sentence
(``.``, ``!``, ``?``) or holds a line break, so a long answer is redirected within a sentence of
the steer. A function call's arguments are never cut: the call completes (and the client's tool
result is then awaited)."""


async def _sample(
    run: ResponseRun, events: ResponseEvents, actions: Sequence[ModelAction], emit: Emit
) -> str | None:
    """Every action's tokens on one decode clock; why it stopped early, if it did."""
    assert run.req is not None and run.replica is not None and run.model is not None
    # The request's budget, within the part of the window its model keeps for the output.
    budget = min(run.req.max_output_tokens or run.model.max_output_tokens, run.model.max_output_tokens)
    clock = run.replica.decode(run.model)
    stop = run.stop
    for action in actions:
        if stop.requested:
            return STEERED  # a boundary: before an item
        if isinstance(action, Call):
            opening = events.begin_call(new_item_id("function_call"), new_id("call"), action.name)
            body = action.arguments
        else:
            opening = events.begin_message(new_item_id("message"))
            body = action.text
        for event in opening:
            await emit(event)
        ids = answer_ids(body)
        room = max(0, budget - run.produced)
        sampled = ids[:room]
        stopped = MAX_OUTPUT_TOKENS if len(sampled) < len(ids) else None
        steerable = isinstance(action, Say)  # a call is never cut
        sent, at_boundary = 0, False
        async with contextlib.aclosing(clock.pace(sampled)) as chunks:
            async for chunk in chunks:
                if steerable and stop.requested:
                    cut = 0 if at_boundary else _boundary_in(chunk)
                    if cut is not None:
                        if cut:
                            await emit(events.delta(decode_text(chunk[:cut])))
                        sent, stopped = sent + cut, STEERED
                        break
                await emit(events.delta(decode_text(chunk)))
                sent += len(chunk)
                at_boundary = ends_sentence(chunk[-1])
        run.produced += sent
        run.output_ids.append(list(sampled[:sent]))
        for event in events.end_item("incomplete" if stopped else "completed"):
            await emit(event)
        if stopped:
            return stopped
    return None


def _boundary_in(chunk: Sequence[int]) -> int | None:
    """How many tokens of ``chunk`` to send before stopping at its first boundary, if it has one."""
    for i, token in enumerate(chunk):
        if ends_sentence(token):
            return i + 1
    return None


@lru_cache(maxsize=4096)
def ends_sentence(token: int) -> bool:
    """Whether a token ends a sentence or a line (``SAFE_BOUNDARIES``).

    >>> [ends_sentence(t) for t in encode_text("Done. Next")]
    [False, True, False]
    """
    text = decode_text([token])
    return "\n" in text or text.rstrip().endswith((".", "!", "?"))


@lru_cache(maxsize=16)
def answer_ids(text: str) -> tuple[int, ...]:
    """The ids of an answer the simulated model gives. A real engine hands the API service the
    tokens it sampled; the simulation tokenizes the text its policy chose instead, once per
    distinct answer (answers repeat: a room runs the same scenario, asks for the same lengths),
    so the server's CPU per turn is the service's, not the simulation's. The 16 most recent
    answers are kept."""
    return tuple(encode_text(text))
