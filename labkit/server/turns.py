"""One response, from a validated request to its last event.

A turn runs in two halves:

- ``Service.prepare`` does the API service's work before inference: history
  hydration, model routing, rendering and tokenization. It raises ``APIError``
  before any event is sent, so HTTP can still answer with a plain 4xx.
- ``Service.execute`` runs inference (prefill, paced decode), streams events
  through ``emit``, and stores the result.

A ``Conversation`` is what a finished turn leaves behind: everything a
follow-up needs. WebSocket mode keeps the latest one in its connection cache;
HTTP rebuilds it from the response store on every follow-up.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.api.errors import (
    APIError,
    invalid_request,
    model_not_found,
    previous_response_not_found,
    server_error,
)
from labkit.api.events import Event, ResponseEvents
from labkit.api.ids import new_id, new_item_id
from labkit.api.requests import CreateRequest, stored_form
from labkit.api.responses import new_response, usage
from labkit.engine.catalogue import Catalogue, ModelSpec, UnknownModel
from labkit.engine.inference import Replica
from labkit.engine.policies import Call, GenericPolicy, Policy, ScriptedPolicy, TurnContext
from labkit.engine.render import TokenBuffer, header_key
from labkit.engine.tokenizer import decode, encode_text
from labkit.server.store import ResponseStore
from labkit.server.traces import Trace, TraceStore

Emit = Callable[[Event], Awaitable[None]]
SCENARIO_KEY = "labkit_scenario"


@dataclass
class Conversation:
    """The state of the most recent response: what a connection cache keeps."""

    response: dict[str, Any]
    items: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    buffer: TokenBuffer
    model: ModelSpec


@dataclass
class Turn:
    req: CreateRequest
    owner: str
    response: dict[str, Any]
    model: ModelSpec
    history: list[dict[str, Any]]
    new_items: list[dict[str, Any]]
    buffer: TokenBuffer
    trace: Trace
    source: str  # where the history came from: none, connection_cache or store
    policy: Policy
    output_ids: list[list[int]] = field(default_factory=list)

    @property
    def items(self) -> list[dict[str, Any]]:
        return self.history + self.new_items


class Service:
    """The API service's resources and the work it does per turn."""

    def __init__(
        self,
        catalogue: Catalogue,
        store: ResponseStore,
        *,
        replica: Replica | None = None,
        scenarios_dir: Path | None = None,
        traces: TraceStore | None = None,
        policy: Policy | None = None,
    ) -> None:
        self.catalogue = catalogue
        self.store = store
        self.replica = replica or Replica()
        self.scenarios_dir = scenarios_dir
        self.traces = traces or TraceStore()
        self.default_policy = policy or GenericPolicy()

    # ------------------------------------------------------------ before inference

    def prepare(self, req: CreateRequest, owner: str, cached: Conversation | None = None) -> Turn:
        """Hydrate, route and render; ``cached`` is a connection cache's hit, if any."""
        trace = Trace()
        with trace.stage("hydrate") as span:
            history, source = self._history(req, owner, cached)
            new_items = self._resolve_references(req.items, owner)
            span.items, span.detail["source"] = len(history), source
        with trace.stage("route") as span:
            if cached is not None and cached.model.name == req.model:
                model = cached.model
                span.detail["reused"] = True
            else:
                try:
                    model = self.catalogue.resolve(req.model)
                except UnknownModel as exc:
                    raise model_not_found(str(exc)) from None
        with trace.stage("render") as span:
            key = header_key(req.instructions, req.tools)
            if cached is not None and cached.buffer.key == key:
                buffer = cached.buffer.fork()
                buffer.append(new_items)
            else:
                buffer = TokenBuffer.start(req.instructions, req.tools)
                buffer.append(history + new_items)
            span.items, span.tokens = len(new_items), buffer.encoded
            span.detail["prompt_tokens"] = len(buffer.ids)
        policy = self.policy_for(req)
        response = new_response(new_id("resp"), req, model.name)
        return Turn(req, owner, response, model, history, new_items, buffer, trace, source, policy)

    def _history(
        self, req: CreateRequest, owner: str, cached: Conversation | None
    ) -> tuple[list[dict[str, Any]], str]:
        prev = req.previous_response_id
        if prev is None:
            return [], "none"
        if cached is not None and cached.response["id"] == prev:
            return cached.items, "connection_cache"
        items = self.store.conversation(owner, prev)
        if items is None:
            raise previous_response_not_found(prev)
        return items, "store"

    def _resolve_references(self, items: list[dict[str, Any]], owner: str) -> list[dict[str, Any]]:
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

    def policy_for(self, req: CreateRequest) -> Policy:
        name = (req.metadata or {}).get(SCENARIO_KEY)
        if not name:
            return self.default_policy
        path = (self.scenarios_dir or Path()) / f"{name}.json"
        if self.scenarios_dir is None or not path.is_file():
            raise invalid_request(
                f"Scenario '{name}' not found.", param=f"metadata.{SCENARIO_KEY}", code="invalid_value"
            )
        return ScriptedPolicy.from_steps(json.loads(path.read_text())["steps"])

    # ------------------------------------------------------------ inference and after

    async def execute(self, turn: Turn, emit: Emit) -> Conversation:
        req, events = turn.req, ResponseEvents(turn.response)
        for event in events.start():
            await emit(event)
        with turn.trace.stage("prefill") as span:
            prefill = await self.replica.prefill(turn.model, turn.buffer.prompt())
            span.tokens, span.detail["cached_tokens"] = prefill.uncached_tokens, prefill.cached_tokens
        status, reason, produced = "completed", None, 0
        if req.generate:
            actions = turn.policy.act(
                TurnContext(
                    items=turn.items,
                    tools=req.tools,
                    tool_choice=req.tool_choice_wire,
                    max_output_tokens=req.max_output_tokens,
                    metadata=req.metadata or {},
                )
            )
            with turn.trace.stage("decode") as span:
                produced, truncated = await self._decode(turn, events, actions, emit)
                span.tokens, span.items = produced, len(actions)
            if truncated:
                status, reason = "incomplete", "max_output_tokens"
        await emit(
            events.finish(status, usage(prefill.prompt_tokens, prefill.cached_tokens, produced), reason)
        )
        return self._conclude(turn)

    async def _decode(
        self, turn: Turn, events: ResponseEvents, actions: Sequence[Any], emit: Emit
    ) -> tuple[int, bool]:
        """Sample every action's tokens on one decode clock; returns (tokens, truncated)."""
        budget = turn.req.max_output_tokens
        clock = self.replica.decode(turn.model)
        produced = 0
        for action in actions:
            if isinstance(action, Call):
                opening = events.begin_call(new_item_id("function_call"), new_id("call"), action.name)
                body = action.arguments
            else:
                opening = events.begin_message(new_item_id("message"))
                body = action.text
            for event in opening:
                await emit(event)
            ids = encode_text(body)
            room = len(ids) if budget is None else max(0, budget - produced)
            sampled = ids[:room]
            async for chunk in clock.pace(sampled):
                await emit(events.delta(decode(list(chunk))))
            produced += len(sampled)
            turn.output_ids.append(sampled)
            truncated = len(sampled) < len(ids)
            for event in events.end_item("incomplete" if truncated else "completed"):
                await emit(event)
            if truncated:
                return produced, True
        return produced, False

    def _conclude(self, turn: Turn) -> Conversation:
        """Keep the turn's KV and rendered tokens, store it if asked, file its trace."""
        output = turn.response["output"]
        with turn.trace.stage("retain") as span:
            for item, ids in zip(output, turn.output_ids, strict=True):
                span.tokens += turn.buffer.append_sampled(item, ids)
            self.replica.retain(turn.buffer.ids)
        if turn.req.store:
            with turn.trace.stage("store") as span:
                inputs, parent = turn.new_items, turn.req.previous_response_id
                if parent and turn.source == "connection_cache" and not self.store.has(turn.owner, parent):
                    # The history came from an unstored response: store it whole, so it is not lost.
                    inputs, parent = turn.items, None
                self.store.save(turn.owner, turn.response, inputs, output, parent=parent)
                span.items = len(inputs) + len(output)
        self.traces.put(turn.owner, turn.response["id"], turn.trace)
        return Conversation(
            response=turn.response,
            items=turn.items + output,
            tools=turn.req.tools,
            buffer=turn.buffer,
            model=turn.model,
        )


def failure(exc: BaseException) -> APIError:
    """The error a client sees for an exception escaping a turn."""
    return exc if isinstance(exc, APIError) else server_error()
