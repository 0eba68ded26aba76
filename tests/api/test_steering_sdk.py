"""Steering as notebook 09 does it, through the official SDK's ``connection.response.steer``, in the
quick run: ``.ci/check-floors`` runs the tests not marked slow with every dependency at its
declared minimum, so this is where the SDK floor is shown to steer. (``test_steering.py`` checks
every steering rule, with servers of its own, in the full run.)

The session's ``labkit serve`` on loopback; the order of events is what is checked, never time.
"""

from __future__ import annotations

from typing import Any

from openai import OpenAI
from openai.types.responses import ResponseSteerAcceptedEvent

SLOW = "labkit-classic"  # 65 tokens/s: a long answer is surely still running when the steer lands
LONG = "Write a long essay about caching."
CORRECTION = "Stop there. Just tell me which test fails."
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def test_a_steer_sent_with_the_sdk_redirects_the_running_answer(client: OpenAI) -> None:
    events: list[Any] = []
    with client.responses.connect() as connection:
        connection.response.create(model=SLOW, input=LONG, store=False)
        for event in connection:
            events.append(event)
            if event.type == "response.output_text.delta":
                break
        target = events[0].response.id
        connection.response.steer(previous_response_id=target, input=CORRECTION)
        for event in connection:
            events.append(event)
            if event.type in TERMINAL and event.response.id != target:
                break

    [accepted] = [e for e in events if e.type == "response.steer.accepted"]
    assert isinstance(accepted, ResponseSteerAcceptedEvent), "the SDK reads it as its own type"
    assert accepted.steer.previous_response_id == target
    [steered] = [e for e in events if e.type == "response.incomplete"]
    assert steered.response.id == target and steered.response.incomplete_details.reason == "steered"
    successor = events[-1]
    assert successor.type == "response.completed", successor
    assert successor.response.previous_response_id == target
    assert CORRECTION in successor.response.output_text, "the model answers the correction"
