"""``POST /v1/responses/compact`` reads ``safety_identifier`` and ``service_tier`` as a create does,
and answers them as the official SDK's ``CompactedResponse`` carries them.

A real ``labkit serve`` on loopback (the session's), the official SDK for the answers and raw
``httpx`` where the error body is the point: a wrong value is refused by compact with the very
error a create gives for it, and a right one is echoed by compact as a create's Response echoes it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.responses import CompactedResponse

from labkit.client.launcher import LabkitServer
from tests.clients.open_responses_schema import validate
from tests.helpers import auth_headers

MODEL = "labkit-spark"
WINDOW = [
    {"role": "user", "content": "Which test fails?"},
    {"role": "assistant", "content": "test_tax fails: the rate is read as a string."},
]


def post(server: LabkitServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/{path}", json=body, headers=auth_headers(), timeout=30)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("service_tier", 5, "invalid_value"),
        ("service_tier", "gold", "invalid_value"),
        ("safety_identifier", 7, "invalid_type"),
        ("safety_identifier", ["user-42"], "invalid_type"),
    ],
)
def test_a_wrong_value_is_the_400_a_create_gives(
    server: LabkitServer, field: str, value: Any, code: str
) -> None:
    body = {"model": MODEL, "input": WINDOW, field: value}
    compacted, created = post(server, "responses/compact", body), post(server, "responses", body)
    assert (compacted.status_code, created.status_code) == (400, 400), compacted.text
    validate("ErrorBody", compacted.json())
    assert compacted.json() == created.json()
    assert (compacted.json()["error"]["param"], compacted.json()["error"]["code"]) == (field, code)


@pytest.mark.parametrize(
    ("sent", "served"),
    [("fast", "priority"), ("flex", "flex"), ("auto", "default"), (None, "default")],
)
def test_the_answer_carries_them_as_the_sdks_compacted_response_does(
    client: OpenAI, sent: str | None, served: str
) -> None:
    settings: dict[str, Any] = {} if sent is None else {"service_tier": sent}
    # safety_identifier in extra_body: compact() takes it as a keyword only in newer SDKs than
    # the floor; on the wire it is the same field.
    compacted = client.responses.compact(
        model=MODEL, input=WINDOW, extra_body={"safety_identifier": "user-42"}, **settings
    )
    assert isinstance(compacted, CompactedResponse)
    assert (compacted.safety_identifier, compacted.service_tier) == ("user-42", served)
    created = client.responses.create(model=MODEL, input="Hi.", safety_identifier="user-42", **settings)
    assert (created.safety_identifier, created.service_tier) == ("user-42", served), "one rule for both"


def test_without_them_the_answer_says_null_and_the_tier_that_served_it(client: OpenAI) -> None:
    raw = client.responses.with_raw_response.compact(model=MODEL, input=WINDOW)
    data = raw.http_response.json()
    validate("CompactResource", data)
    assert (data["safety_identifier"], data["service_tier"]) == (None, "default")  # present, as null
    parsed = raw.parse()
    assert isinstance(parsed, CompactedResponse)
    assert (parsed.safety_identifier, parsed.service_tier) == (None, "default")
