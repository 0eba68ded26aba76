"""Error shapes as the protocol documents them: fields, statuses and types."""

from __future__ import annotations

import json

import pytest

from labkit.api.errors import (
    APIError,
    authentication_error,
    invalid_request,
    previous_response_not_found,
    response_not_found,
)
from tests.api.turns import SDK_EVENT

# ---------------------------------------------------------------- errors

ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    "err",
    [
        invalid_request("Bad thing.", param="input[0].role", code="invalid_value"),
        invalid_request("Bad body."),  # param and code null, but present
        previous_response_not_found("resp_x"),
        response_not_found("resp_x"),
        authentication_error(),
    ],
)
def test_error_shapes(err: APIError) -> None:
    body = err.body()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert body["error"] == {"message": err.message, "type": err.type, "param": err.param, "code": err.code}

    ws = err.ws_event()
    nested = {**body["error"], "code": err.code or err.type}  # WebSocket codes are always strings
    assert ws == {"type": "error", "status": err.status, "error": nested}

    sse = err.sse_event(7)
    assert sse == {
        "type": "error",
        "code": err.code,
        "message": err.message,
        "param": err.param,
        "error": body["error"],
        "sequence_number": 7,
    }
    assert SDK_EVENT.validate_python(sse).type == "error"
    json.dumps([body, ws, sse])


def test_previous_response_not_found_is_as_documented() -> None:
    err = previous_response_not_found("resp_x")
    assert err.status == 400
    assert err.body() == {
        "error": {
            "message": "Previous response with id 'resp_x' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


def test_error_statuses_and_types_pair_as_documented() -> None:
    assert (authentication_error().status, authentication_error().type) == (401, "authentication_error")
    assert (response_not_found("r").status, response_not_found("r").type) == (404, "not_found_error")
    assert (invalid_request("x").status, invalid_request("x").type) == (400, "invalid_request_error")
