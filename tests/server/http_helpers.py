"""What the HTTP tests share: the model, the prefix cache's block, raw POSTs, error envelopes and
the checks of a streamed turn's order and usage."""

from __future__ import annotations

import json
from typing import Any

import httpx

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    API_KEY,
    ERROR_KEYS,
    auth_headers,
)

MODEL = "labkit-spark"
BLOCK = 16  # the prefix cache's block size: cached_tokens is always a multiple of it

# ---------------------------------------------------------------- helpers


def raw_post(server: LabkitServer, body: Any, *, key: str | None = API_KEY) -> httpx.Response:
    """POST /v1/responses with an arbitrary body: a dict as JSON, bytes as they are."""
    headers = {"content-type": "application/json", **(auth_headers(key) if key else {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.base_url}/responses", content=content, headers=headers, timeout=30)


def sse_frames(server: LabkitServer, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    """POST /v1/responses with ``stream: true``: the response and its whole SSE text."""
    with httpx.stream(
        "POST",
        f"{server.base_url}/responses",
        json={**body, "stream": True},
        headers=auth_headers(),
        timeout=30,
    ) as resp:
        text = "".join(resp.iter_text())
    return resp, text


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    """The ``error`` object of an error response, after checking the envelope's exact shape."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def check_sequence(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events)))


def check_usage(usage: Any) -> None:
    assert usage is not None
    assert usage.input_tokens > 0
    assert usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    cached = usage.input_tokens_details.cached_tokens
    assert 0 <= cached <= usage.input_tokens
    assert cached % BLOCK == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
