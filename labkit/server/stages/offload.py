"""CPU work beside the event loop: a stage's tokenizing or scanning, in a worker thread when large.

The CPU work of input_safety, render and output_safety runs in a worker thread when the
text it works over has at least ``OFF_LOOP_CHARS`` characters (about 8k tokens, a few
milliseconds of work): meanwhile the event loop serves everyone else, and tiktoken
releases the GIL while it encodes, so the work really runs beside the loop. Smaller
inputs stay inline, as every ordinary turn's do: a thread hop costs about 0.1 ms.

The work gets its inputs and returns its result; what it must never touch (what the
event loop shares) is listed in ``labkit.server.stages.render_cache``.

    >>> import asyncio
    >>> from labkit.server.stores.traces import Span
    >>> span = Span("render", 0.0)
    >>> asyncio.run(off_loop_if_large(OFF_LOOP_CHARS, span, sum, [1, 2, 3])), span.detail
    (6, {'threads': 1})
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from labkit.engine.render import item_block
from labkit.server.stores.traces import Span

P = ParamSpec("P")
R = TypeVar("R")

OFF_LOOP_CHARS = 32_768


async def off_loop_if_large(
    chars: int, span: Span, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    """``work(*args, **kwargs)``, in a worker thread when ``chars >= OFF_LOOP_CHARS``; the span
    notes the threads it used."""
    if chars < OFF_LOOP_CHARS:
        return work(*args, **kwargs)
    span.detail["threads"] = span.detail.get("threads", 0) + 1
    return await asyncio.to_thread(work, *args, **kwargs)


def text_chars(items: Sequence[dict[str, Any]]) -> int:
    """Characters the chat template renders ``items`` to (without its markup).

    >>> text_chars([{"type": "message", "role": "user", "content": "hi"}])  # "user" + "hi"
    6
    """
    return sum(len(header) + len(body) for header, body in map(item_block, items))
