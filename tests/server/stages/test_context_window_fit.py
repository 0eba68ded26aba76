"""``fit_window`` against an oracle: a truncated prompt is exactly a fresh render of the items it
kept, and it keeps as many as fit.

In process, on conversations of every item shape the chat template knows (the strategies of
``tests.engine.test_render``) and windows of every size up to the whole prompt. The oracle is
``encode_rendered(render_conversation(...))``, the whole window tokenized at once; minimal means
one more of the dropped items would not fit, or would leave a tool output without its call first.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from labkit.api.errors import APIError
from labkit.api.requests import CreateBody, CreateRequest
from labkit.designs import WEBSOCKET
from labkit.engine.catalogue import ModelSpec
from labkit.engine.render import (
    GENERATION_PROMPT,
    TokenBuffer,
    encode_block,
    encode_rendered,
    item_block,
    render_conversation,
    system_block,
)
from labkit.server.stages.context_window import fit_window
from labkit.server.stages.response_run import ResponseRun
from tests.engine.test_render import assume_plain, instructions, items, tool_lists

pytestmark = pytest.mark.slow  # a property search

Item = dict[str, Any]
OUTPUT_PART = 100  # what the model keeps of its window for the output: the input gets the rest


def turn_of(
    instr: str | None, tools: list[Item], conversation: list[Item], limit: int, truncation: str
) -> ResponseRun:
    """A turn rendered and routed, as the stages leave it for ``fit_window``."""
    turn = ResponseRun(design=WEBSOCKET, owner="key_a")
    body = CreateBody(model="m", instructions=instr, truncation=truncation)  # type: ignore[arg-type]
    turn.req = CreateRequest(body, list(conversation), tools)
    turn.new_items = list(conversation)
    turn.buffer = TokenBuffer.start(instr, tools)
    turn.buffer.append(conversation)
    turn.model = ModelSpec("m", 1, 1, context_window=limit + OUTPUT_PART, max_output_tokens=OUTPUT_PART)
    return turn


def fewest_to_drop(instr: str | None, tools: list[Item], conversation: list[Item], limit: int) -> int:
    """The oracle's count: the fewest oldest items whose dropping fits the limit, then any tool
    output that would be left first."""
    blocks = [len(encode_block(*item_block(item))) for item in conversation]
    prompt = len(encode_block(*system_block(instr, tools))) + sum(blocks) + len(GENERATION_PROMPT)
    dropped = 0
    while dropped < len(conversation) and prompt > limit:
        prompt -= blocks[dropped]
        dropped += 1
    while dropped < len(conversation) and conversation[dropped].get("type") == "function_call_output":
        dropped += 1
    return dropped


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instructions, tool_lists, st.lists(items, min_size=2, max_size=8), st.data())
def test_a_truncated_prompt_is_a_fresh_render_of_the_fewest_items_dropped(
    instr: str | None, tools: list[Item], conversation: list[Item], data: st.DataObject
) -> None:
    assume_plain(instr, tools, conversation)
    bare = len(TokenBuffer.start(instr, tools)) + len(GENERATION_PROMPT)  # what always stays
    whole = bare + sum(len(encode_block(*item_block(item))) for item in conversation)
    newest = bare + len(encode_block(*item_block(conversation[-1])))  # the least that can be kept
    limit = data.draw(st.integers(newest - 3, whole + 3), label="input limit")
    turn = turn_of(instr, tools, conversation, limit, "auto")
    try:
        asyncio.run(fit_window(turn))
    except APIError as refused:
        event("refused")
        assert refused.code == "context_length_exceeded"
        assert whole > limit and fewest_to_drop(instr, tools, conversation, limit) == len(conversation)
        return
    assert turn.buffer is not None
    event("fits" if whole <= limit else "truncated")
    if whole <= limit:  # it fits: nothing is touched
        assert turn.compacted is None and len(turn.buffer) + len(GENERATION_PROMPT) == whole
        return
    dropped = fewest_to_drop(instr, tools, conversation, limit)
    assert turn.compacted == conversation[dropped:] and turn.items == conversation[dropped:]
    assert list(turn.buffer.ids) == encode_rendered(render_conversation(instr, tools, conversation[dropped:]))
    assert len(turn.buffer) + len(GENERATION_PROMPT) <= limit


def test_disabled_refuses_and_gives_back_what_it_appended() -> None:
    conversation = [{"type": "message", "role": "user", "content": "one two three " * 20}]
    turn = turn_of(None, [], conversation, 10, "disabled")
    with pytest.raises(APIError) as refused:
        asyncio.run(fit_window(turn))
    assert (refused.value.status, refused.value.code, refused.value.param) == (
        400,
        "context_length_exceeded",
        "input",
    )
    assert turn.buffer is not None and len(turn.buffer) == 0  # discarded


def test_a_refusal_lets_go_of_its_request_at_once() -> None:
    """Nothing of a refused request waits for the garbage collector: the refusal is raised as it
    is made, so no frame both holds it and is held by its traceback (a cycle that kept a large
    request's megabytes until a collection ran)."""
    conversation = [{"type": "message", "role": "user", "content": "one two three " * 20}]
    gc.disable()
    try:
        turn = turn_of(None, [], conversation, 10, "disabled")
        alive = weakref.ref(turn)
        step = fit_window(turn)
        with contextlib.suppress(APIError):
            step.send(None)  # no await before the refusal: it is raised at once
        del turn, step
        assert alive() is None
    finally:
        gc.enable()
