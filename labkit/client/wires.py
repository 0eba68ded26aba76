"""Three wires for one agent loop, side by side: what a client sends and receives over each.

One short exchange per wire, against labkit's server: a create, the model's one tool call,
the client's tool output, the answer.

- ``prototype``: labkit's reconstruction of the prototype's wire (a raw socket): the response
  pauses with ``response.done`` and resumes on ``response.append``;
- ``launch``: WebSocket mode as it launched (the official SDK's ``responses.connect()``): the
  response ends on its call, and a second ``response.create`` with ``previous_response_id``
  carries the output;
- ``inject``: the official SDK's beta connection (``beta.responses.connect()``, the
  multi-agent beta): the response waits after the call's item, and ``response.inject``
  carries the output.

    table = side_by_side(server.base_url, server.api_key)   # a row per step, a column per wire
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any

import pandas as pd
from openai import OpenAI
from websockets.sync.client import connect

from labkit.api.event_types import (
    INJECT_FAILED,
    OUTPUT_ITEM_DONE,
    RESPONSE_APPEND,
    RESPONSE_CREATE,
    RESPONSE_DONE,
    RESPONSE_INJECT,
    TERMINAL_EVENTS,
)
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY, SCENARIO_KEY
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.scenarios import FETCH_TOOL

CLIENT, SERVER = "client", "server"
Frame = tuple[str, str]  # who sent it, and its type
# One call to the synthetic scenario's fetch tool, then a short answer.
SCENARIO = "synthetic:turns=2,output_tokens=6,tool_tokens=6,instruction_tokens=16"
COLUMNS = {
    "prototype": "the prototype (labkit's reconstruction)",
    "launch": "the launch (WebSocket mode)",
    "inject": "the beta (response.inject)",
}


def _body(session: str) -> dict[str, Any]:
    return {
        "model": "labkit-spark",
        "instructions": f"Session {session}. Fetch one thing, then answer.",
        "tools": [FETCH_TOOL],
        "input": "Fetch one thing, then answer.",
        "metadata": {SCENARIO_KEY: SCENARIO},
        "store": False,
    }


def _output(call: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call["call_id"], "output": "fetched"}


def _until(
    events: Iterator[dict[str, Any]], log: list[Frame], stop: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Read and log server events up to the first that ``stop`` holds for, or a terminal one."""
    for event in events:
        log.append((SERVER, event["type"]))
        if event["type"] in ("error", INJECT_FAILED):
            raise RuntimeError(f"the exchange failed: {event}")
        if stop(event) or event["type"] in TERMINAL_EVENTS:
            return event
    raise RuntimeError("the connection closed before the exchange ended")


def _called(event: dict[str, Any]) -> bool:
    return event["type"] == OUTPUT_ITEM_DONE and event["item"]["type"] == "function_call"


def _sdk_events(conn: Any) -> Iterator[dict[str, Any]]:
    while True:
        yield json.loads(conn.recv_bytes())


def exchange(base_url: str, api_key: str, wire: str, session: str = "wires") -> list[Frame]:
    """Every frame of one exchange over ``wire`` (a key of ``COLUMNS``), in order."""
    log: list[Frame] = [(CLIENT, RESPONSE_CREATE)]
    body = _body(session)
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    try:
        if wire == "launch":
            with client.responses.connect() as conn:
                conn.response.create(**body)
                first = _until(_sdk_events(conn), log, lambda e: False)["response"]
                log.append((CLIENT, RESPONSE_CREATE))
                conn.response.create(
                    **body | {"previous_response_id": first["id"], "input": [_output(first["output"][-1])]}
                )
                _until(_sdk_events(conn), log, lambda e: False)
        elif wire == "inject":
            headers = {BETA_HEADER: MULTI_AGENT_BETA, DESIGN_HEADER: "appended"}
            with client.beta.responses.connect(extra_headers=headers) as conn:
                conn.response.create(**body)
                events = _sdk_events(conn)
                created = next(events)
                log.append((SERVER, created["type"]))
                call = _until(events, log, _called)["item"]
                log.append((CLIENT, RESPONSE_INJECT))
                conn.response.inject(response_id=created["response"]["id"], input=[_output(call)])
                _until(events, log, lambda e: False)
        elif wire == "prototype":
            url = base_url.replace("http", "ws", 1) + f"/responses?{DESIGN_QUERY}=appended"
            with connect(url, additional_headers={"Authorization": f"Bearer {api_key}"}) as ws:
                ws.send(json.dumps({"type": RESPONSE_CREATE, **body}))
                events = (json.loads(ws.recv(timeout=30)) for _ in iter(int, 1))
                pause = _until(events, log, lambda e: e["type"] == RESPONSE_DONE)
                log.append((CLIENT, RESPONSE_APPEND))
                outputs = [_output(call) for call in pause["pending_calls"]]
                ws.send(
                    json.dumps(
                        {"type": RESPONSE_APPEND, "response_id": pause["response_id"], "input": outputs}
                    )
                )
                _until(events, log, lambda e: False)
        else:
            raise ValueError(f"unknown wire {wire!r}: choose from {', '.join(COLUMNS)}")
    finally:
        client.close()
    return log


def steps(log: list[Frame]) -> list[str]:
    """The log as steps, each one side's run of frames; event types without their ``response.``
    prefix, a run of one type shown once with its count.

    >>> steps([("client", "response.create"), ("server", "response.created"),
    ...        ("server", "response.output_text.delta"), ("server", "response.output_text.delta")])
    ['create', 'created → output_text.delta ×2']
    """
    shown = []
    for _, frames in groupby(log, key=lambda frame: frame[0]):
        kinds = [kind.removeprefix("response.") for _, kind in frames]
        runs = [(kind, len(list(same))) for kind, same in groupby(kinds)]
        shown.append(" → ".join(kind if n == 1 else f"{kind} ×{n}" for kind, n in runs))
    return shown


def side_by_side(base_url: str, api_key: str) -> pd.DataFrame:
    """The three wires' exchanges, a column each; the rows the client's two requests and what
    the server answers to each.

        side_by_side(server.base_url, server.api_key)   # lab.wire_events in a notebook
    """
    columns = {title: steps(exchange(base_url, api_key, wire)) for wire, title in COLUMNS.items()}
    rows = [
        "1 · the client sends",
        "1 · the server answers",
        "2 · the client sends",
        "2 · the server answers",
    ]
    return pd.DataFrame(columns, index=rows).rename_axis("event types, without 'response.'")
