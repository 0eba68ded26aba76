"""The Response object and its usage block, as plain JSON-ready dicts."""

from __future__ import annotations

import time
from typing import Any

from labkit.api.requests import CreateRequest

TERMINAL_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
}
TERMINAL_EVENTS = tuple(TERMINAL_EVENT.values())
DELTA_EVENTS = ("response.output_text.delta", "response.function_call_arguments.delta")


def usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The ``usage`` block, e.g. ``usage(100, 64, 20)["total_tokens"] -> 120``."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def new_response(response_id: str, req: CreateRequest, model: str) -> dict[str, Any]:
    """A Response in status ``in_progress`` with no output yet, echoing the request's settings."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "completed_at": None,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "prompt_cache_key": req.prompt_cache_key,
        "reasoning": req.reasoning or {"effort": None, "summary": None},
        "safety_identifier": req.safety_identifier,
        "store": req.store,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": req.text or {"format": {"type": "text"}},
        "tool_choice": req.tool_choice_wire,
        "tools": req.tools,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "truncation": req.truncation or "disabled",
        "usage": None,
        "user": req.user,
    }


def finish(
    response: dict[str, Any],
    status: str,
    usage_block: dict[str, Any],
    *,
    incomplete_reason: str | None = None,
) -> None:
    """Close a response in place: status, usage, completion time."""
    response["status"] = status
    response["usage"] = usage_block
    response["completed_at"] = int(time.time())
    if incomplete_reason:
        response["incomplete_details"] = {"reason": incomplete_reason}
