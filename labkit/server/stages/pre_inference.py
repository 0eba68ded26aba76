"""The stages before inference: what the API service does with a request before the model sees it.

    validation    what the client sent, checked whole: a create's body (or a compaction's,
                  or the items an appended rollout was sent)
    hydration     the conversation so far: from the connection cache or the SQLite store
    input_safety  the classifier over the input it has not seen before
    render        chat template + tokenization, skipped for what a cache already holds
    routing       model configuration and the choice of a replica; then the prompt must fit the
                  model's context window (``labkit.server.stages.context_window``)
    intermediary  the hop through an intermediary service, where the design keeps it

Any of them may refuse the request with an ``APIError``, before any event is sent. Each is a
``labkit.server.stages.runner.RunnerStage``: it names its stage, keeps the profile entry and the
resources it uses, and is called with the response's run alone. ``STAGES`` lists them for
``labkit.server.stages.pipeline.Pipeline`` to build; whether one runs is the runner's question
(``labkit.server.stages.runner``), never the stage's.
"""

from __future__ import annotations

from typing import Any

from labkit.api.compaction import without_replaced
from labkit.api.errors import invalid_request, model_not_found, previous_response_not_found
from labkit.api.ids import new_id, new_item_id
from labkit.api.items import Item
from labkit.api.requests import check_new_items, parse_create, stored_form
from labkit.api.responses import new_response
from labkit.api.stages import Source, Stage
from labkit.designs import Over
from labkit.engine import timing
from labkit.engine.catalogue import UnknownModel
from labkit.engine.safety import classifier_texts, scan
from labkit.server.stages.context_window import fit_window
from labkit.server.stages.offload import off_loop_if_large
from labkit.server.stages.render_cache import append_rendered
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.runner import Resources, RunnerStage
from labkit.server.stages.sampling import settle
from labkit.server.stages.scripts import ScriptLibrary
from labkit.server.stores.traces import TraceStore


def accept_create(run: ResponseRun, body: Any) -> list[Item]:
    """A create's body: the run's request.

    >>> from labkit.designs import SPRINT
    >>> run = ResponseRun(design=SPRINT, owner="key_a")
    >>> len(accept_create(run, {"model": "labkit-spark", "input": "Hi"})), run.req.model
    (1, 'labkit-spark')
    """
    run.req = parse_create(body)
    if run.req.background:
        raise invalid_request("labkit does not run background responses.", param="background")
    return run.req.items


class Validation(RunnerStage):
    """Check what the client sent (``ResponseRun.body``), all of it, and take it: the run's
    ``accept`` reads it onto the run (a create's body, unless the run says otherwise)."""

    stage = Stage.VALIDATION

    async def __call__(self, run: ResponseRun) -> None:
        body, run.body = run.body, None
        accept = run.accept or accept_create
        with run.trace.stage(Stage.VALIDATION) as span:
            span.items = len(accept(run, body))


class Hydration(RunnerStage):
    """The conversation so far: the connection cache's answer (``ResponseRun.parent``), or the store."""

    stage = Stage.HYDRATION

    def __init__(self, resources: Resources) -> None:
        self.store = resources.store

    async def __call__(self, run: ResponseRun) -> None:
        req = run.req
        assert req is not None
        with run.trace.stage(Stage.HYDRATION) as span:
            prev = req.previous_response_id
            if prev is None:
                run.history, run.source = [], Source.NONE
            elif run.parent is not None:  # the connection cache's answer (``ResponseRun.parent``)
                run.history, run.source = run.parent.items, Source.CONNECTION_CACHE
            else:
                items = await self.store.conversation(run.owner, prev)
                if items is None:
                    raise previous_response_not_found(prev)
                run.history, run.source = items, Source.STORE
            sent = await self.resolve_references(req.items, run.owner)
            # Needs the history: a tool output must answer a call in it (or in the new items).
            check_new_items(run.history, sent, run.owner)
            # A compaction item in the input stands for what it replaced before it (a stateless
            # client sends both): the model reads the compacted window.
            run.new_items = without_replaced(sent)
            span.items, span.detail["source"] = len(run.history), run.source
            if len(run.new_items) < len(sent):
                span.detail["replaced"] = len(sent) - len(run.new_items)

    async def resolve_references(self, items: list[Item], owner: str) -> list[Item]:
        resolved = []
        for i, item in enumerate(items):
            if item.get("type") == "item_reference":
                found = await self.store.find_item(owner, item["id"])
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


def unseen_input(run: ResponseRun) -> list[Item]:
    """What the input classifier must read: on an appended rollout's later segment, what was
    appended (new input is new to the classifier: the prototype stopped re-reading the history,
    not this); otherwise, per the plan, the whole history or only the new items (when the
    connection cache vouches for the rest)."""
    if run.trace.segment > 0:
        return run.appending
    if run.plan[Stage.INPUT_SAFETY].over is Over.NEW and run.from_connection_cache:
        return run.new_items
    return run.items


class InputSafety(RunnerStage):
    """Scan the input it has not read (``unseen_input``) for real, then spend the modeled
    classifier time for what was scanned."""

    stage = Stage.INPUT_SAFETY

    def __init__(self, resources: Resources) -> None:
        self.safety = resources.profile.safety

    async def __call__(self, run: ResponseRun) -> None:
        items = unseen_input(run)
        with run.trace.stage(Stage.INPUT_SAFETY) as span:
            texts = classifier_texts(items)
            result = await off_loop_if_large(sum(map(len, texts)), span, scan, texts)
            span.items, span.tokens, span.detail["flags"] = len(items), result.tokens, result.flags
            await timing.sleep(self.safety.cost_s(result.tokens, fast=run.design.fast_classifiers))


class Render(RunnerStage):
    """Tokenize only what no cache holds (``labkit.server.stages.render_cache``). An appended rollout
    that resumes goes on with its own buffer: the outputs it paused on, then what was appended;
    its model is known by then, so its prompt must fit the window here (``fit_window``)."""

    stage = Stage.RENDER

    def __init__(self, resources: Resources) -> None:
        self.renderings = resources.renderings

    async def __call__(self, run: ResponseRun) -> None:
        with run.trace.stage(Stage.RENDER) as span:
            if run.buffer is None:
                buffer, todo = await self.renderings.start(run, span)
                encoded = copied = 0  # a new buffer (or a fork) counts its work from zero
            else:
                buffer, encoded, copied = run.buffer, run.buffer.encoded, run.buffer.copied
                settle(run)
                # A waiting response keeps its sampled tokens' KV on the replica, as a paused
                # sequence does: the next segment prefills only what was appended.
                assert run.replica is not None
                buffer.add_block_hashes(run.replica.retain(buffer.ids, buffer.block_hashes))
                todo, span.detail["cache"] = run.take_appending(), Source.RESPONSE
            await append_rendered(buffer, todo, span)
            run.buffer = buffer
            span.items, span.tokens = len(todo), buffer.encoded - encoded
            span.detail["prompt_tokens"] = len(buffer)
            span.detail["copied_ids"] = buffer.copied - copied
        if run.model is not None:  # a later segment: the first was fitted at routing
            await fit_window(run)


class Routing(RunnerStage):
    """The model's configuration (a hop, unless the design caches it) and the replica: the
    connection's, or the router's pick; a follow-up from the connection cache reuses both.
    Then the rendered prompt must fit the model's context window (``fit_window``: refused, or
    truncated where the request allows it), before the response exists."""

    stage = Stage.ROUTING

    def __init__(self, resources: Resources) -> None:
        self.routing, self.router = resources.profile.routing, resources.router

    async def __call__(self, run: ResponseRun) -> None:
        await self.resolve(run)
        await fit_window(run)

    async def resolve(self, run: ResponseRun) -> None:
        req = run.req
        assert req is not None
        with run.trace.stage(Stage.ROUTING) as span:
            cached = run.parent
            if cached is not None and cached.model.name == req.model:
                run.model, run.replica, span.detail["reused"] = cached.model, cached.replica, True
                return
            model = self.router.cached_config(req.model) if run.design.model_config_cache else None
            span.detail["config_cache"] = model is not None
            if model is None:
                await timing.sleep(self.routing.model_config_hop_ms / 1000)
                try:
                    model = self.router.fetch_config(req.model)
                except UnknownModel as exc:
                    raise model_not_found(str(exc)) from None
            run.model = model
            run.replica = run.pinned or self.router.pick(req.prompt_cache_key, run.owner)
            span.detail["replica"] = run.replica.name


class Intermediary(RunnerStage):
    """The hop through an intermediary service (run where the design's plan keeps it)."""

    stage = Stage.INTERMEDIARY

    def __init__(self, resources: Resources) -> None:
        self.intermediary = resources.profile.intermediary

    async def __call__(self, run: ResponseRun) -> None:
        with run.trace.stage(Stage.INTERMEDIARY) as span:
            span.detail["hop_ms"] = self.intermediary.hop_ms  # the profile's, modelled
            await timing.sleep(self.intermediary.hop_ms / 1000)


#: This module's stages, for the pipeline to build (in any order: the plan orders them).
STAGES: tuple[type[RunnerStage], ...] = (Validation, Hydration, InputSafety, Render, Routing, Intermediary)


def open_response(run: ResponseRun, scripts: ScriptLibrary, traces: TraceStore) -> None:
    """The Response object this run will stream, and the policy that decides its output."""
    assert run.req is not None and run.model is not None
    run.policy = scripts.policy_for(run.req.metadata)
    run.response = new_response(new_id("resp"), run.req, run.model.name)
    # Kept while it runs too, so a response's spans can be read before it ends (an appended rollout).
    traces.put(run.owner, run.response["id"], run.trace)
