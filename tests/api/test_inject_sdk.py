"""The multi-agent beta's ``response.inject`` as notebook 04 sends it, through the official SDK's
``client.beta.responses.connect``, in the quick run: ``.ci/check-floors`` runs the tests not marked
slow with every dependency at its declared minimum, so this is where the SDK floor is shown to
inject. (``test_inject.py`` checks every rule of the beta, with servers of its own, in the full run.)

The session's ``labkit serve`` on loopback; the order of events is what is checked, never time.
"""

from __future__ import annotations

import uuid
from typing import Any

from openai import OpenAI
from openai.types.beta.beta_response_inject_created_event import BetaResponseInjectCreatedEvent

from labkit.api.extensions import DESIGN_HEADER
from labkit.scenarios import FETCH_TOOL

BETA = {"OpenAI-Beta": "responses_multi_agent=v1", DESIGN_HEADER: "appended"}
SCENARIO = "synthetic:turns=2,output_tokens=20,tool_tokens=50,instruction_tokens=100"  # one call
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def test_an_inject_sent_with_the_sdk_resumes_the_waiting_response(client: OpenAI) -> None:
    events: list[Any] = []
    with client.beta.responses.connect(extra_headers=BETA) as connection:
        connection.response.create(
            model="labkit-spark",
            instructions=f"Session {uuid.uuid4().hex}. Fetch what you need, then answer.",
            tools=[FETCH_TOOL],
            input="Work through the task.",
            metadata={"labkit_scenario": SCENARIO},
            store=False,
        )
        for event in connection:
            events.append(event)
            if event.type in TERMINAL:
                break
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                output = {"type": "function_call_output", "call_id": event.item.call_id, "output": "ok"}
                connection.response.inject(response_id=events[0].response.id, input=[output])

    [created] = [e for e in events if e.type == "response.inject.created"]
    assert isinstance(created, BetaResponseInjectCreatedEvent), "the SDK reads it as its own type"
    response_ids = {e.response.id for e in events if hasattr(e, "response")}
    assert len(response_ids) == 1, "one response: it waited at the call and resumed"
    assert events[-1].type == "response.completed", events[-1]
    kinds = [item.type for item in events[-1].response.output]
    assert kinds[0] == "function_call" and kinds[-1] == "message", kinds
