"""Compaction: a long window in, a short window out that a response can start from.

Two ways in: ``POST /v1/responses/compact`` (``compact``; its endpoint is in
``labkit.server.http``), and a create's ``context_management``, which has the response compact
its own input first (``compact_first``).

The window is the conversation of ``previous_response_id`` (read from the store, as
over HTTP) followed by ``input``. The answer is the compact resource::

    {"id": "resp_…", "object": "response.compaction", "created_at": …,
     "output": [<every user message, as it was>, {"type": "compaction", "id": "cmp_…",
                "encrypted_content": "lkc1.…"}],
     "usage": {"input_tokens": <the window>, "output_tokens": <the summary>, …},
     "safety_identifier": <as sent, or null>, "service_tier": <the tier that served it>}

The simulated model reads the window (a prefill on a replica, so a window it has just
served comes out of the prefix cache) and writes the summary at its decode speed: that is
the compaction pass ``usage`` accounts for. So the window must fit the model's context window:
routing refuses one past it (``context_length_exceeded``, ``labkit.server.stages.context_window``;
a compact body has no ``truncation``), and ``context_management`` compacts what a create's
own truncation left. The summary is built from the window by rule,
so the same window always compacts to the same item. Nothing is stored: a compaction item
is self-contained and sealed to the key (``labkit.api.compaction``), so it serves
``store: false`` clients too, over HTTP or as the first input of a new WebSocket chain.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from labkit.api.compaction import OBJECT, Payload, is_user_message, open_payload, seal
from labkit.api.errors import invalid_request
from labkit.api.event_types import OUTPUT_TEXT_DELTA
from labkit.api.events import Event, ResponseEvents
from labkit.api.ids import new_id
from labkit.api.items import Item
from labkit.api.requests import CreateBody, CreateRequest, parse_compact
from labkit.api.responses import new_response, usage
from labkit.api.stages import Source, Stage
from labkit.engine.policies import Say, TurnContext
from labkit.engine.render import TokenBuffer, content_text, encode_block, item_block
from labkit.server.stages.pipeline import Emit, Pipeline
from labkit.server.stages.post_inference import charge
from labkit.server.stages.render_cache import append_rendered
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.runner import run_stages
from labkit.server.stages.sampling import settle
from labkit.text.tokenizer import decode_text, encode_text

# The request's settings the compact resource echoes, as a create's Response echoes them.
ECHOED = ("safety_identifier", "service_tier")
# Each excerpt in a summary: about 1/25 of the window it replaces, within these bounds (tokens).
EXCERPT_MIN, EXCERPT_MAX = 8, 96
LAST_LINES = ("Last assistant message: ", "Last tool result: ")


# The stages before inference a compaction pass runs (as the plan has them): the window read, then
# rendered and routed. No classifier reads it, and it takes no intermediary hop.
WINDOW, PROMPT = {Stage.VALIDATION, Stage.HYDRATION}, {Stage.RENDER, Stage.ROUTING}


async def compact(pipeline: Pipeline, run: ResponseRun, body: Any) -> dict[str, Any]:
    """The compaction pass through the pipeline's stages: validation, hydration (the window),
    render, routing, then queue, prefill and the summary's decode; returns the compact resource."""
    run.body, run.accept = body, accept_compaction
    await run_stages(pipeline.stages, run, WINDOW)
    window = run.items
    if not window:
        raise invalid_request("There is nothing to compact: 'input' is empty.", param="input")
    await run_stages(pipeline.stages, run, PROMPT)  # a large window is tokenized off the loop
    assert run.model is not None and run.req is not None
    kept, payload = summarize(window)
    run.response = {"id": new_id("resp"), "object": OBJECT, "model": run.model.name, "output": []}
    async with pipeline.queue(run):
        await pipeline.prefill(run)
        # The summary is written at the model's speed, as a message the pass keeps: nothing streams.
        await pipeline.decode(run, ResponseEvents(run.response), [Say(payload.summary)], _kept_back)
    item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": seal(payload, run.owner)}
    pipeline.billing.charge_later(charge(run, "completed"))
    pipeline.traces.put(run.owner, run.response["id"], run.trace)
    echo = new_response(run.response["id"], run.req, run.model.name)
    return {
        "id": run.response["id"],
        "object": OBJECT,
        "created_at": int(time.time()),
        "output": [*kept, item],
        "usage": usage(run.prompt_tokens, run.cached_tokens, run.produced),
        **{key: echo[key] for key in ECHOED},
    }


async def compact_first(pipeline: Pipeline, run: ResponseRun, events: ResponseEvents, send: Emit) -> None:
    """``context_management``: a response whose rendered input is past its ``compact_threshold``
    compacts it first, as ``POST /v1/responses/compact`` would, inside the response.

    The model reads the window (a prefill) and samples the summary (one
    ``response.compaction.compacting`` event per chunk, carrying none of it), which becomes a
    ``compaction`` output item. The window is then the user messages and that item: rendered
    anew, it is the prompt the response goes on with (its own prefill), and what a follow-up
    continues. ``usage`` counts both prompts and the summary's tokens.
    """
    assert run.req is not None
    kept, payload = summarize(run.items)
    async with pipeline.queue(run):
        await pipeline.prefill(run)
        await send(events.begin_compaction(new_id("cmp")))

        async def compacting(event: Event) -> None:
            if event["type"] == OUTPUT_TEXT_DELTA:  # only the pace of the summary shows
                await send(events.compacting())

        scratch = ResponseEvents({"output": []})  # the summary is not a message of the response
        await pipeline.decode(run, scratch, [Say(payload.summary)], compacting)
    await send(events.end_compaction(seal(payload, run.owner)))
    with run.trace.stage(Stage.RENDER) as span:  # the compacted window, rendered anew
        buffer = TokenBuffer.start(run.req.instructions, run.req.tools)
        await append_rendered(buffer, kept, span)
        span.items, span.tokens = len(kept), buffer.encoded
        span.detail["cache"], span.detail["compacted"] = Source.NONE, True
    run.compacted, run.appended, run.settled = kept, [], 0
    run.buffer, run.hasher = buffer, None
    settle(run)  # the compaction item, from the summary's sampled ids
    span.detail["prompt_tokens"] = len(buffer)


def accept_compaction(run: ResponseRun, body: Any) -> list[Item]:
    """A compact body, onto the run as the create the pass amounts to: the window as input,
    no tools, nothing stored.

    >>> from labkit.designs import SPRINT
    >>> run = ResponseRun(design=SPRINT, owner="key_a")
    >>> len(accept_compaction(run, {"model": "labkit-spark", "input": "Hi"})), run.req.tools
    (1, [])
    """
    req = parse_compact(body)
    create = CreateBody(
        model=req.model,
        instructions=req.instructions,
        previous_response_id=req.previous_response_id,
        prompt_cache_key=req.prompt_cache_key,
        safety_identifier=req.safety_identifier,
        service_tier=req.service_tier,
        store=False,
    )
    run.req = CreateRequest(create, req.items, tools=[])
    return req.items


async def _kept_back(event: Event) -> None:
    return None


# ---------------------------------------------------------------- the summary


def excerpt(text: str, limit: int) -> str:
    """The first ``limit`` tokens of ``text`` (marked when cut).

    >>> excerpt("one two three four", 2)
    'one two…'
    """
    ids = encode_text(" ".join(text.split()))
    return decode_text(ids) if len(ids) <= limit else decode_text(ids[:limit]).rstrip() + "…"


def summarize(window: Sequence[Item]) -> tuple[list[Item], Payload]:
    """The user messages to keep, and the payload of the item that replaces everything else.

    Deterministic: a tally of what was replaced (earlier compactions included), the tools
    called, and short excerpts of the last assistant message and tool result.

    >>> kept, payload = summarize([
    ...     {"type": "message", "role": "user", "content": "List the files."},
    ...     {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
    ...     {"type": "function_call_output", "call_id": "call_1", "output": "a.py b.py"},
    ...     {"type": "message", "role": "assistant", "content": "There are two files."}])
    >>> [item["content"] for item in kept], payload.calls, payload.tools, payload.task_calls
    (['List the files.'], ('call_1',), {'ls': 1}, 1)
    >>> print(payload.summary)
    Compacted context: 3 earlier items (38 tokens).
    Tools called: ls x1.
    Last assistant message: There are two files.
    Last tool result: a.py b.py
    """
    kept = [item for item in window if is_user_message(item)]
    replaced = [item for item in window if not is_user_message(item)]
    opened = [open_payload(i.get("encrypted_content")) for i in replaced if i.get("type") == "compaction"]
    earlier = [payload for payload in opened if payload is not None]
    fresh = [item for item in replaced if item.get("type") != "compaction"]
    calls: dict[str, None] = {}  # ordered, without repeats
    tools: Counter[str] = Counter()
    for payload in earlier:
        calls.update(dict.fromkeys(payload.calls))
        tools.update(payload.tools)
    for item in fresh:
        if item.get("type") == "function_call":
            calls[str(item.get("call_id"))] = None
            tools[str(item.get("name"))] += 1
    items = sum(p.items for p in earlier) + len(fresh)
    tokens = sum(p.tokens for p in earlier) + sum(len(encode_block(*item_block(i))) for i in fresh)
    limit = max(EXCERPT_MIN, min(EXCERPT_MAX, tokens // 25))
    # The latest excerpts win; an earlier compaction's stand in for what this window lacks.
    last: dict[str, str] = {}
    for payload in earlier:
        for line in payload.summary.splitlines():
            last.update({head: line for head in LAST_LINES if line.startswith(head)})
    for item in fresh:
        if item.get("type") == "message" and item.get("role") == "assistant":
            last[LAST_LINES[0]] = LAST_LINES[0] + excerpt(content_text(item.get("content")), limit)
        elif item.get("type") == "function_call_output":
            last[LAST_LINES[1]] = LAST_LINES[1] + excerpt(content_text(item.get("output")), limit)
    lines = [f"Compacted context: {items} earlier items ({tokens} tokens)."]
    if tools:
        lines.append("Tools called: " + ", ".join(f"{name} x{n}" for name, n in tools.items()) + ".")
    lines += [last[head] for head in LAST_LINES if head in last]
    payload = Payload(
        "\n".join(lines),
        calls=tuple(calls),
        items=items,
        tokens=tokens,
        tools=dict(tools),
        # what the model has done for the task so far, which the compaction must not forget
        task_calls=TurnContext(window).calls_for_last_user(),
    )
    return kept, payload
