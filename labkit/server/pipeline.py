"""The API service's stages: each one small, named, and recording a span of what it did.

Before inference (a stage may refuse the request with an ``APIError``, before any event):

    connect       open a connection (TCP + TLS round trips), where one is really opened
    uplink        the request crossing the network
    auth          the key check, and the auth service hop
    validation    pydantic over the whole body the client sent
    hydration     the conversation so far: from the connection cache or the SQLite store
    input_safety  the classifier over the input it has not seen before
    render        chat template + tokenization, skipped for what a cache already holds
    routing       model configuration and the choice of a replica
    intermediary  the hop through an intermediary service, where the design keeps it

Inference and after:

    downlink      the answer's first byte crossing the network
    queue         waiting for a slot on the replica
    prefill       the prompt tokens the replica's prefix cache lacks
    decode        sampling, paced at the model's speed
    output_safety the classifier over the new output
    retain        the conversation's KV and rendering kept for the next turn
    storage       the response and its items into SQLite (store=true)
    billing       one ledger row, blocking or overlapped with the next request

What a stage does under a design comes from the design's plan
(``labkit.designs``); the order they run in is ``labkit.server.responder``'s
(and ``labkit.server.appended``'s for the prototype).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from labkit.api.errors import invalid_request, model_not_found, previous_response_not_found
from labkit.api.events import Event, ResponseEvents
from labkit.api.ids import new_id, new_item_id
from labkit.api.requests import check_new_items, parse_create, stored_form
from labkit.api.responses import new_response
from labkit.api.stages import Stage
from labkit.designs import Over, Runs
from labkit.engine import timing
from labkit.engine.catalogue import Catalogue, UnknownModel
from labkit.engine.inference import Prefill
from labkit.engine.policies import Action, Call, GenericPolicy, Policy, TurnContext
from labkit.engine.prefix_cache import CacheWork
from labkit.engine.render import (
    GENERATION_PROMPT,
    TokenBuffer,
    content_text,
    encode_items,
    header_key,
    item_block,
)
from labkit.engine.tokenizer import decode, encode_text
from labkit.server.auth import Keys
from labkit.server.billing import Billing, Charge, Ledger
from labkit.server.network import ConnectionTracker
from labkit.server.profiles import Profile
from labkit.server.render_cache import PrefixHasher, RenderCache
from labkit.server.routing import Router, serve_as
from labkit.server.safety import classifier_texts, scan
from labkit.server.scripts import ScriptLibrary
from labkit.server.store import ResponseStore
from labkit.server.trace_stream import TraceFeed
from labkit.server.traces import Span, Trace, TraceStore
from labkit.server.turn import Turn

Emit = Callable[[Event], Awaitable[None]]
P = ParamSpec("P")
R = TypeVar("R")


class Pipeline:
    """The stages, and the resources they use (stores, router, caches, billing)."""

    def __init__(
        self,
        catalogue: Catalogue,
        profile: Profile,
        store: ResponseStore,
        ledger: Ledger,
        *,
        keys: Keys | None = None,
        data_dir: Path | None = None,
        traces: TraceStore | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.profile = profile
        self.store = store
        self.keys = keys or Keys()
        self.router = Router(
            catalogue,
            profile.engine.replicas,
            block_size=profile.engine.block_size,
            cache_capacity_tokens=profile.engine.cache_capacity_tokens,
        )
        self.slots = {r.name: asyncio.Semaphore(profile.engine.max_concurrent) for r in self.router.replicas}
        self.render_cache = RenderCache()
        self.billing = Billing(ledger, profile.billing.hop_ms / 1000)
        self.connections = ConnectionTracker()
        self.scripts = ScriptLibrary(data_dir, policy or GenericPolicy())
        self.traces = traces or TraceStore()
        self.feed = TraceFeed()  # subscribers to finished responses' traces

    @property
    def catalogue(self) -> Catalogue:
        return self.router.catalogue

    # ------------------------------------------------------------ the network and the door

    async def connect(self, trace: Trace, client: tuple[str, int] | None, *, new: bool | None = None) -> None:
        """Pay the handshakes if this request opened a connection (read off the real socket)."""
        opened = self.connections.is_new(client) if new is None else new
        with trace.stage(Stage.CONNECT, new_connection=opened):
            if opened:
                await _sleep(self.profile.network.handshake_s())

    async def upgrade(self, trace: Trace) -> None:
        """WebSocket mode: the upgrade request and its 101 answer, one round trip."""
        with trace.stage(Stage.UPGRADE):
            await _sleep(self.profile.network.rtt_ms / 1000)

    async def uplink(self, trace: Trace) -> None:
        with trace.stage(Stage.UPLINK):
            await _sleep(self.profile.network.one_way_s())

    async def authenticate(self, trace: Trace, authorization: str | None) -> str:
        """The real key check, plus the auth service hop; returns the owner id."""
        with trace.stage(Stage.AUTH):
            owner = self.keys.owner(authorization)
            await _sleep(self.profile.auth.hop_ms / 1000)
        serve_as(owner)  # the caches this request reaches are its owner's view of them
        return owner

    async def depart(self, turn: Turn) -> None:
        """The answer's first byte of a segment crossing the network: paid once per segment."""
        if turn.depart():
            with turn.trace.stage(Stage.DOWNLINK):
                await _sleep(self.profile.network.one_way_s())

    def sender(self, turn: Turn, emit: Emit) -> Emit:
        """``emit`` for this turn, paying the downlink before the first event of each segment."""

        async def send(event: Event) -> None:
            if not turn.departed:  # checked here: every delta comes this way
                await self.depart(turn)
            await emit(event)

        return send

    # ------------------------------------------------------------ before inference

    def validate(self, turn: Turn, body: Any) -> None:
        with turn.trace.stage(Stage.VALIDATION) as span:
            turn.req = parse_create(body)
            span.items = len(turn.req.items)
            if turn.req.background:
                raise invalid_request("labkit does not run background responses.", param="background")

    def hydrate(self, turn: Turn) -> None:
        req = turn.req
        assert req is not None
        with turn.trace.stage(Stage.HYDRATION) as span:
            prev = req.previous_response_id
            cached = turn.cached if turn.design.connection_cache else None
            if prev is None:
                turn.history, turn.source = [], "none"
            elif cached is not None and cached.response["id"] == prev:
                turn.history, turn.source = cached.items, "connection_cache"
            else:
                items = self.store.conversation(turn.owner, prev)
                if items is None:
                    raise previous_response_not_found(prev)
                turn.history, turn.source = items, "store"
            turn.new_items = self.resolve_references(req.items, turn.owner)
            # Needs the history: a tool output must answer a call in it (or in the new items).
            check_new_items(turn.history, turn.new_items, turn.owner)
            span.items, span.detail["source"] = len(turn.history), turn.source

    def resolve_references(self, items: list[dict[str, Any]], owner: str) -> list[dict[str, Any]]:
        resolved = []
        for i, item in enumerate(items):
            if item.get("type") == "item_reference":
                found = self.store.find_item(owner, item["id"])
                if found is None:
                    raise invalid_request(
                        f"Item with id '{item['id']}' not found.",
                        param=f"input[{i}].id",
                        code="item_not_found",
                    )
                item = found
            else:
                item = stored_form({"id": new_item_id(item["type"]), **item} if "id" not in item else item)
            resolved.append(item)
        return resolved

    def unseen_input(self, turn: Turn) -> list[dict[str, Any]]:
        """What the input classifier must read: per the plan, the whole history or only the new
        items (when the connection cache vouches for the rest)."""
        if turn.plan[Stage.INPUT_SAFETY].over is Over.NEW and turn.cache_hit:
            return turn.new_items
        return turn.items

    async def input_safety(self, turn: Turn, items: Sequence[dict[str, Any]]) -> None:
        """Scan the items for real, then spend the modeled classifier time for what was scanned."""
        with turn.trace.stage(Stage.INPUT_SAFETY) as span:
            texts = classifier_texts(items)
            result = await off_loop_if_large(sum(map(len, texts)), span, scan, texts)
            span.items, span.tokens, span.detail["flags"] = len(items), result.tokens, result.flags
            await _sleep(self.profile.safety.cost_s(result.tokens, fast=turn.design.fast_classifiers))

    async def render(self, turn: Turn) -> None:
        """Tokenize only what no cache holds: the connection's buffer, or the sprint's render cache."""
        req = turn.req
        assert req is not None
        with turn.trace.stage(Stage.RENDER) as span:
            key = header_key(req.instructions, req.tools)
            cached = turn.cached if turn.cache_hit else None
            reuse = turn.plan[Stage.RENDER].over is Over.NEW
            if reuse and cached is not None and cached.buffer.key == key:
                # A view of the connection's buffer: the history's ids are shared, not copied.
                buffer, todo, span.detail["cache"] = cached.buffer.fork(), turn.new_items, "connection"
                turn.hasher = cached.hasher.copy() if cached.hasher else None
            elif reuse and turn.design.render_cache:
                turn.hasher = PrefixHasher(key, turn.owner)  # a key's renderings are its own
                items = turn.items
                keys = await off_loop_if_large(text_chars(items), span, turn.hasher.extend, items)
                found, used = self.render_cache.longest_prefix(keys)
                buffer = found or TokenBuffer.start(req.instructions, req.tools)
                todo, span.detail["cache"] = items[used:], "render_cache" if found else "miss"
            else:
                buffer, todo, span.detail["cache"] = (
                    TokenBuffer.start(req.instructions, req.tools),
                    turn.items,
                    "none",
                )
            await append_rendered(buffer, todo, span)
            turn.buffer = buffer
            span.items, span.tokens = len(todo), buffer.encoded
            span.detail["prompt_tokens"] = len(buffer)
            span.detail["copied_ids"] = buffer.copied

    async def route(self, turn: Turn) -> None:
        req = turn.req
        assert req is not None
        with turn.trace.stage(Stage.ROUTING) as span:
            cached = turn.cached if turn.cache_hit else None
            if cached is not None and cached.model.name == req.model:
                turn.model, turn.replica, span.detail["reused"] = cached.model, cached.replica, True
                return
            model = self.router.cached_config(req.model) if turn.design.model_config_cache else None
            span.detail["config_cache"] = model is not None
            if model is None:
                await _sleep(self.profile.routing.model_config_hop_ms / 1000)
                try:
                    model = self.router.fetch_config(req.model)
                except UnknownModel as exc:
                    raise model_not_found(str(exc)) from None
            turn.model = model
            turn.replica = turn.pinned or self.router.pick(req.prompt_cache_key, turn.owner)
            span.detail["replica"] = turn.replica.name

    async def intermediary(self, turn: Turn) -> None:
        if turn.plan[Stage.INTERMEDIARY].runs is not Runs.NEVER:
            with turn.trace.stage(Stage.INTERMEDIARY):
                await _sleep(self.profile.intermediary.hop_ms / 1000)

    def open_response(self, turn: Turn) -> None:
        """The Response object this turn will stream, and the policy that decides its output."""
        assert turn.req is not None and turn.model is not None
        turn.policy = self.scripts.policy_for(turn.req.metadata)
        turn.response = new_response(new_id("resp"), turn.req, turn.model.name)
        # Kept from now on, so a response's spans can be read while it runs (an appended rollout).
        self.traces.put(turn.owner, turn.response["id"], turn.trace)

    # ------------------------------------------------------------ inference

    async def infer(self, turn: Turn, events: ResponseEvents, emit: Emit) -> tuple[bool, bool]:
        """Queue, prefill, decode one sampling segment; returns (truncated, paused on a call)."""
        req, model, replica, buffer = turn.req, turn.model, turn.replica, turn.buffer
        assert req is not None and model is not None and replica is not None and buffer is not None
        with turn.trace.stage(Stage.QUEUE):
            await self.slots[replica.name].acquire()
        try:
            with turn.trace.stage(Stage.PREFILL) as span:
                prefill: Prefill = await replica.prefill(
                    model, buffer.ids, buffer.block_keys, tail=GENERATION_PROMPT
                )
                span.tokens, span.detail["cached_tokens"] = prefill.uncached_tokens, prefill.cached_tokens
                span.detail["hashed_blocks"] = prefill.work.hashed_blocks
                span.detail["touched_blocks"] = prefill.work.touched_blocks
            turn.prompt_tokens += prefill.prompt_tokens
            turn.cached_tokens += prefill.cached_tokens
            if not req.generate:
                return False, False
            assert turn.policy is not None
            actions = turn.policy.act(
                TurnContext(
                    items=turn.conversation(),
                    tools=req.tools,
                    tool_choice=req.tool_choice_wire,
                    max_output_tokens=req.max_output_tokens,
                )
            )
            await self.depart(turn)  # a resumed segment's first event: the network before decoding
            with turn.trace.stage(Stage.DECODE) as span:
                before = turn.produced
                truncated = await self._decode(turn, events, actions, emit)
                span.tokens, span.items = turn.produced - before, len(actions)
            return truncated, bool(actions) and isinstance(actions[-1], Call)
        finally:
            self.slots[replica.name].release()

    async def _decode(
        self, turn: Turn, events: ResponseEvents, actions: Sequence[Action], emit: Emit
    ) -> bool:
        """Sample every action's tokens on one decode clock; True if max_output_tokens cut it."""
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

    # ------------------------------------------------------------ after inference

    async def output_safety(self, turn: Turn, items: Sequence[dict[str, Any]]) -> None:
        """Scan the output's text; its tokens are the ones the model sampled (not tokenized again)."""
        with turn.trace.stage(Stage.OUTPUT_SAFETY) as span:
            texts = [
                content_text(i.get("content")) if i["type"] == "message" else i["arguments"] for i in items
            ]
            sampled = sum(map(len, turn.output_ids))
            result = await off_loop_if_large(sum(map(len, texts)), span, scan, texts, tokens=sampled)
            span.items, span.tokens, span.detail["flags"] = len(items), result.tokens, result.flags
            await _sleep(self.profile.safety.cost_s(result.tokens, fast=turn.design.fast_classifiers))

    def settle(self, turn: Turn) -> int:
        """Append the outputs sampled since the last settle to the rendered buffer (headers only)."""
        assert turn.buffer is not None
        outputs, ids = turn.unsettled()
        added = sum(
            turn.buffer.append_sampled(item, sampled) for item, sampled in zip(outputs, ids, strict=True)
        )
        turn.appended += outputs
        turn.settled = len(turn.response["output"])
        return added

    def retain(self, turn: Turn) -> None:
        """Settle the outputs and keep the whole conversation's KV (and rendering) for next time.

        Proportional to what this turn added: the prefix cache hashes the blocks after the
        buffer's known keys, the render cache keeps a view of the buffer (no copy), and the
        render cache's running hash reads only the items it has not read yet.
        """
        buffer = turn.buffer
        assert buffer is not None and turn.replica is not None
        with turn.trace.stage(Stage.RETAIN) as span:
            copied = buffer.copied
            span.tokens = self.settle(turn)
            work = CacheWork()
            buffer.add_block_keys(turn.replica.retain(buffer.ids, buffer.block_keys, work))
            hashed = 0
            if turn.design.render_cache:
                hasher = turn.hasher or PrefixHasher(buffer.key, turn.owner)
                hashed = len(hasher.extend(turn.items_from(hasher.count)))
                turn.hasher = hasher
                if hasher.last is not None:
                    self.render_cache.put(hasher.last, buffer)
            span.detail.update(
                hashed_blocks=work.hashed_blocks,
                touched_blocks=work.touched_blocks,
                copied_ids=buffer.copied - copied,
                hashed_items=hashed,
            )

    def storage(self, turn: Turn) -> None:
        req = turn.req
        assert req is not None
        if not req.store:
            return
        with turn.trace.stage(Stage.STORAGE) as span:
            output = turn.response["output"]
            # An appended rollout's tool results are inputs too (stored after the first input).
            inputs = turn.new_items + [i for i in turn.appended if i not in output]
            parent = req.previous_response_id
            if parent and turn.cache_hit and not self.store.has(turn.owner, parent):
                # The history came from an unstored response: store it whole, so it is not lost.
                inputs, parent = turn.history + inputs, None
            self.store.save(turn.owner, turn.response, inputs, output, parent=parent)
            span.items = len(inputs) + len(output)

    def charge(self, turn: Turn, status: str) -> Charge:
        turn.billed = True
        return Charge(
            turn.response["id"],
            turn.owner,
            turn.response["model"],
            turn.prompt_tokens,
            turn.cached_tokens,
            turn.produced,
            status,
        )

    async def bill(self, turn: Turn, status: str) -> None:
        """Blocking billing waits for the service; overlapped billing only queues the charge."""
        overlapped = turn.plan[Stage.BILLING].overlapped
        with turn.trace.stage(Stage.BILLING, overlapped=overlapped):
            charge = self.charge(turn, status)
            if overlapped:
                self.billing.charge_later(charge)
            else:
                await self.billing.charge(charge)

    def bill_if_abandoned(self, turn: Turn) -> None:
        """A response that ended early (an error, a disconnect) still pays for its prompt."""
        if not turn.billed and turn.prompt_tokens:
            self.billing.charge_later(self.charge(turn, "cancelled"))


# The CPU work of input_safety, render and output_safety runs in a worker thread when the text it
# works over has at least this many characters (about 8k tokens, a few milliseconds of work):
# meanwhile the event loop serves everyone else, and tiktoken releases the GIL while it encodes,
# so the work really runs beside the loop. Smaller inputs stay inline, as every ordinary turn's
# do: a thread hop costs about 0.1 ms.
OFF_LOOP_CHARS = 32_768


@lru_cache(maxsize=16)
def answer_ids(text: str) -> tuple[int, ...]:
    """The ids of an answer the simulated model gives. A real engine hands the API service the
    tokens it sampled; the simulation tokenizes the text its policy chose instead, once per
    distinct answer (answers repeat: a room runs the same scenario, asks for the same lengths),
    so the server's CPU per turn is the service's, not the simulation's. The 16 most recent
    answers are kept."""
    return tuple(encode_text(text))


def text_chars(items: Sequence[dict[str, Any]]) -> int:
    """Characters the chat template renders ``items`` to (without its markup)."""
    return sum(len(header) + len(body) for header, body in map(item_block, items))


async def off_loop_if_large(
    chars: int, span: Span, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    """``work(*args, **kwargs)``, in a worker thread when ``chars >= OFF_LOOP_CHARS``.

    ``work`` must not touch what the event loop shares (caches, buffers): it gets its
    inputs and returns its result. The span notes the threads it used.
    """
    if chars < OFF_LOOP_CHARS:
        return work(*args, **kwargs)
    span.detail["threads"] = span.detail.get("threads", 0) + 1
    return await asyncio.to_thread(work, *args, **kwargs)


async def append_rendered(buffer: TokenBuffer, items: Sequence[dict[str, Any]], span: Span) -> None:
    """Render and append ``items``: the tokenizing off the loop when they are large, the
    appending always on it (views of a buffer share its ids, so only the loop changes them)."""
    blocks = await off_loop_if_large(text_chars(items), span, encode_items, items)
    buffer.append_blocks(blocks)


async def _sleep(seconds: float) -> None:
    # A modeled delay keeps its length on a coarse (Windows) timer too: see labkit.engine.timing.
    await timing.sleep(seconds)
