"""The model's context window: a response's prompt must fit it, refused past it or truncated.

Every model of the catalogue has a window (``ModelSpec.context_window``, ``models.toml``) and
keeps part of it for the output (``max_output_tokens``); the prompt a response reads (what
``usage.input_tokens`` counts: the rendered instructions, tools and conversation, and the
assistant's turn opener) may use the rest, ``ModelSpec.input_limit``. ``fit_window`` checks
each prompt once it is rendered and its model known: the routing stage's last step, and the
render stage's for an appended rollout's later segments. Past the limit:

- ``truncation: "disabled"`` (the default): the API's 400 ``context_length_exceeded``
  (``labkit.api.errors``), before any event of the response;
- ``truncation: "auto"``: whole items go, oldest first, until the prompt fits (``oldest_to_drop``).
  The instructions and tools always stay; a tool output left first, its call gone, goes too. If
  that leaves no item (the newest alone does not fit), the request is refused as above; nor does
  truncation reach an appended rollout's own outputs and tool results.

What truncation leaves is the response's input from then on: the prompt is the system block
and the kept items' blocks, cut out of the rendered ids without tokenizing them again (the
template renders each block on its own, ``labkit.engine.render``); only the dropped items are
tokenized, to count them. The turn's window (``ResponseRun.compacted``, as after a compaction)
becomes the kept items, so the conversation a follow-up continues is what the model read: the
connection cache keeps this rendering and the next turn appends to it; a stored response is
stored with the kept window as its input and starts its chain again, so a follow-up read from
the store renders the same items. The prefix cache misses past the system block, since every
later token has moved: that prefill is real work.

    >>> from labkit.engine.render import encode_block, item_block
    >>> items = [{"type": "message", "role": "user", "content": w} for w in ("one", "two", "three")]
    >>> sizes = [len(encode_block(*item_block(item))) for item in items]
    >>> oldest_to_drop(items, excess=sizes[0] + 1) == (2, sizes[0] + sizes[1])
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.api.errors import APIError, context_length_exceeded
from labkit.api.items import Item
from labkit.api.stages import Source, Stage
from labkit.engine.catalogue import ModelSpec
from labkit.engine.render import GENERATION_PROMPT, TokenBuffer, encode_block, item_block, system_block
from labkit.server.stages.offload import off_loop_if_large
from labkit.server.stages.response_run import ResponseRun

AUTO = "auto"  # the truncation that drops items; "disabled" (or none) refuses


def prompt_tokens(buffer: TokenBuffer) -> int:
    """The tokens a prefill of ``buffer`` reads: what ``usage.input_tokens`` counts."""
    return len(buffer) + len(GENERATION_PROMPT)


async def fit_window(turn: ResponseRun) -> None:
    """Refuse the turn's prompt past its model's input limit, or truncate it to fit (``truncation:
    "auto"``); a prompt that fits is left as it is."""
    model, buffer, req = turn.model, turn.buffer, turn.req
    assert model is not None and buffer is not None and req is not None
    prompt = prompt_tokens(buffer)
    if prompt <= model.input_limit:
        return
    if req.truncation != AUTO:
        buffer.discard()  # what it appended to a cached conversation's ids goes with it
        raise too_long(model, prompt)
    window = turn.compacted if turn.compacted is not None else turn.history + turn.new_items
    with turn.trace.stage(Stage.RENDER) as span:
        items = turn.items
        # A prompt past the limit is large (every built-in limit is above the offload bound).
        system, (dropped, dropped_tokens) = await off_loop_if_large(
            prompt, span, _measure, req.instructions, req.tools, items, prompt - model.input_limit
        )
        # Something must stay, and an appended rollout's own items (after ``window``) always do.
        if dropped >= len(items) or dropped > len(window):
            buffer.discard()
            raise too_long(model, prompt)
        kept = buffer.ids[len(system) + dropped_tokens :]
        turn.buffer = TokenBuffer(
            buffer.system_digest,
            ids=[*system, *kept],
            items=len(items) - dropped,
            encoded=len(system) + dropped_tokens,
        )
        buffer.discard()  # the kept ids are copied: the longer rendering is no one's
        turn.compacted, turn.hasher = window[dropped:], None  # a new prefix: hashed anew when kept
        span.items, span.tokens = dropped, len(system) + dropped_tokens
        span.detail.update(
            cache=Source.NONE,
            truncated_items=dropped,
            truncated_tokens=dropped_tokens,
            prompt_tokens=len(turn.buffer),
        )


def too_long(model: ModelSpec, prompt: int) -> APIError:
    """The refusal of a ``prompt`` past ``model``'s input limit. Made where it is raised, never
    kept in a local: an exception a frame holds, and whose traceback holds that frame, is a cycle
    that keeps the request's megabytes until the garbage collector runs."""
    return context_length_exceeded(prompt, model.name, model.context_window, model.input_limit)


def _measure(
    instructions: str | None, tools: Sequence[Item], items: Sequence[Item], excess: int
) -> tuple[list[int], tuple[int, int]]:
    """The system block's ids, and what ``oldest_to_drop`` drops. Pure: it may run in a worker."""
    return encode_block(*system_block(instructions, tools)), oldest_to_drop(items, excess)


def oldest_to_drop(items: Sequence[Item], excess: int) -> tuple[int, int]:
    """How many of the oldest ``items`` to drop so that at least ``excess`` tokens go, and their
    tokens; a tool output left first (its call dropped) goes too. Only what is dropped is tokenized.

    >>> call = {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}
    >>> output = {"type": "function_call_output", "call_id": "c", "output": "a.py"}
    >>> oldest_to_drop([call, output, {"type": "message", "role": "user", "content": "hi"}], 1)[0]
    2
    """
    dropped = tokens = 0
    while dropped < len(items) and (tokens < excess or items[dropped].get("type") == "function_call_output"):
        tokens += len(encode_block(*item_block(items[dropped])))
        dropped += 1
    return dropped, tokens
