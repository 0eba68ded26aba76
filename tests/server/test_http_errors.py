"""Error bodies over HTTP: invalid bodies and JSON, unknown fields and routes, in the protocol's
error shape, through the SDK and raw ``httpx``.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    auth_headers,
)
from tests.server.http_helpers import MODEL, error_of, raw_post

# ---------------------------------------------------------------- 8. error bodies


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": MODEL, "input": "hi", "temperature": "hot"}, "temperature", "invalid_type"),
        ({"input": "hi"}, "model", "missing_required_parameter"),
        ({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, "input[0].role", None),
        (
            {"model": MODEL, "input": [{"role": "user", "content": "ok"}, {"role": "user"}]},
            "input[1].content",
            "missing_required_parameter",
        ),
        ({"model": "no-such-model", "input": "hi"}, "model", "model_not_found"),
        ({"model": MODEL, "input": "hi", "max_output_tokens": 15}, "max_output_tokens", None),
        ({"model": MODEL, "input": "hi", "temperature": 3}, "temperature", None),
        ({"model": MODEL, "input": "hi", "tool_choice": "sometimes"}, "tool_choice", None),
        ({"model": MODEL, "input": "hi", "store": "maybe"}, "store", None),
        ({"model": MODEL, "input": 42}, "input", None),
    ],
)
def test_invalid_bodies(server: LabkitServer, body: dict[str, Any], param: str, code: str | None) -> None:
    err = error_of(raw_post(server, body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    if code is not None:
        assert err["code"] == code


def test_invalid_json_body(server: LabkitServer) -> None:
    err = error_of(raw_post(server, b'{"model": "labkit-spark", "input": '), 400)
    assert err["type"] == "invalid_request_error"
    err = error_of(raw_post(server, b"[1, 2]"), 400)
    assert err["type"] == "invalid_request_error"
    err = error_of(raw_post(server, b"\xff\xfe"), 400)
    assert err["type"] == "invalid_request_error"


def test_unknown_fields_ignored(server: LabkitServer) -> None:
    body = {
        "model": MODEL,
        "input": "hi",
        "frobnicate": {"level": 11},
        "service_tier": "auto",
        "stream_options": {"include_obfuscation": False},
        "client_metadata": {"x": "y"},
    }
    resp = raw_post(server, body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed"


def test_sdk_bad_request_error_fields(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="no-such-model", input="hi")
    assert info.value.status_code == 400
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=8)
    assert info.value.param == "max_output_tokens"


def test_unknown_route_error_shape(server: LabkitServer) -> None:
    err = error_of(httpx.get(f"{server.base_url}/nothing-here", headers=auth_headers()), 404)
    assert err["type"] == "not_found_error"
