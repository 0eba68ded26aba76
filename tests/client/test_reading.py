"""Reading one response off a WebSocket, as the notebooks do by hand: an SDK connection until its
response completes (or fails, with the server's words), the prototype's raw wire until it pauses."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI
from websockets.sync.client import connect

from labkit.client.launcher import LabkitServer
from labkit.client.reading import ResponseFailed, completed, until_paused
from labkit.scenarios import FETCH_TOOL
from tests.helpers import auth_headers


def test_completed_returns_the_response_a_connection_completes(client: OpenAI) -> None:
    with client.responses.connect() as connection:
        connection.response.create(model="labkit-spark", input="Remember the number 7.", store=False)
        response = completed(connection)
        connection.response.create(
            model="labkit-spark", previous_response_id=response.id, input="Which number?", store=False
        )
        follow_up = completed(connection)
    assert response.status == follow_up.status == "completed"
    assert follow_up.previous_response_id == response.id


def test_an_error_raises_with_the_servers_code_and_the_socket_still_serves(client: OpenAI) -> None:
    with client.responses.connect() as connection:
        connection.response.create(
            model="labkit-spark", previous_response_id="resp_nobody", input="Which number?", store=False
        )
        with pytest.raises(ResponseFailed, match="previous_response_not_found"):
            completed(connection)
        connection.response.create(model="labkit-spark", input="Hello.", store=False)
        assert completed(connection).status == "completed"


def test_until_paused_reads_the_prototypes_wire_to_each_pause(server: LabkitServer) -> None:
    create = {
        "type": "response.create",
        "model": "labkit-spark",
        "tools": [FETCH_TOOL],
        "input": "Work through the task.",
        "metadata": {"labkit_scenario": "synthetic:turns=2,output_tokens=10,tool_tokens=50"},
        "store": False,
    }
    with connect(server.ws_url + "?design=appended", additional_headers=auth_headers()) as ws:
        ws.send(json.dumps(create))
        pause, kinds, deltas = until_paused(ws)
        outputs = [
            {"type": "function_call_output", "call_id": call["call_id"], "output": "done"}
            for call in pause["pending_calls"]
        ]
        append = {"type": "response.append", "response_id": pause["response_id"], "input": outputs}
        ws.send(json.dumps(append))
        end, more, _ = until_paused(ws)
    assert kinds[0] == "response.created" and kinds[-1] == "response.done" and outputs
    assert deltas > 0 and not any(kind.endswith(".delta") for kind in kinds + more)  # counted, not listed
    assert end["type"] == "response.completed" and "response.created" not in more
