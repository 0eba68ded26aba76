"""The Response object and its usage block, as plain JSON-ready dicts.

A Response echoes every setting of its request, or the setting's default, with every field
the Open Responses ``ResponseResource`` requires present (``null`` where it allows it).
"""

from __future__ import annotations

import time
from typing import Any

from labkit.api.requests import CreateRequest

# The tier a requested service tier is served at (labkit has one: every request runs the same way).
SERVICE_TIER_USED = {"auto": "default", "fast": "priority"}
# A function tool's fields that the Response always carries, null when the request left them out.
FUNCTION_TOOL_FIELDS = ("type", "name", "description", "parameters", "strict")


def usage(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The ``usage`` block, e.g. ``usage(100, 64, 20)["total_tokens"] -> 120``."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as the Response lists it: a function tool with all its fields, others as sent.

    >>> echo_tool({"type": "function", "name": "now"})
    {'type': 'function', 'name': 'now', 'description': None, 'parameters': None, 'strict': None}
    """
    if tool.get("type") != "function":
        return tool
    return {**{key: tool.get(key) for key in FUNCTION_TOOL_FIELDS}, **tool}


def echo_reasoning(reasoning: dict[str, Any] | None) -> dict[str, Any]:
    """``reasoning`` with ``effort`` and ``summary`` always present (null when not set)."""
    return {"effort": None, "summary": None, **(reasoning or {})}


def echo_text(text: dict[str, Any] | None) -> dict[str, Any]:
    """``text`` with a ``format``: plain text unless the request named another."""
    text = dict(text or {})
    if text.get("format") is None:
        text["format"] = {"type": "text"}
    return text


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
        "frequency_penalty": 0.0 if req.frequency_penalty is None else req.frequency_penalty,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "max_tool_calls": req.max_tool_calls,
        "metadata": req.metadata or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls,
        "presence_penalty": 0.0 if req.presence_penalty is None else req.presence_penalty,
        "previous_response_id": req.previous_response_id,
        "prompt_cache_key": req.prompt_cache_key,
        "reasoning": echo_reasoning(req.reasoning),
        "safety_identifier": req.safety_identifier,
        "service_tier": SERVICE_TIER_USED.get(req.service_tier or "auto", req.service_tier),
        "store": req.store,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": echo_text(req.text),
        "tool_choice": req.tool_choice_wire,
        "tools": [echo_tool(tool) for tool in req.tools],
        "top_logprobs": 0 if req.top_logprobs is None else req.top_logprobs,
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
