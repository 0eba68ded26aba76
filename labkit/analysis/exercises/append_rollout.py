"""The conversation exercise 2's appends run on: a rollout played once over the official SDK.

``rollout_conversation`` plays a scenario the sprint's way (the whole history over HTTP each turn),
runs its tools for real, and keeps, per append, the items that were new; ``check_append`` then
appends them one batch at a time, as the render cache does turn by turn.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from openai import OpenAI

from labkit.api.extensions import DESIGN_HEADER, SCENARIO_KEY
from labkit.api.items import Item, replayable
from labkit.client.agent import MAX_TURNS, Toolbox
from labkit.client.room import client_key
from labkit.scenarios import Scenario


@dataclass
class Conversation:
    """A rollout's conversation, as the appends see it: the system block's inputs and, per
    append, the items that are new (the user's message, then each turn's output and tool
    outputs, and at the end the final answer)."""

    instructions: str
    tools: list[Item]
    batches: list[list[Item]]

    @property
    def items(self) -> list[Item]:
        return [item for batch in self.batches for item in batch]


def rollout_conversation(base_url: str, scenario: Scenario, model: str = "labkit-burst") -> Conversation:
    """Play ``scenario`` once over the official SDK (the sprint's design: the whole history over
    HTTP each turn), running its tools for real, and return the conversation it built. The
    model's speed changes only how long that takes (the scripted replies are the same): the
    fastest model is the default."""
    toolbox = Toolbox(scenario)
    headers = {DESIGN_HEADER: "sprint"}
    cache_key = f"labkit-{uuid.uuid4().hex[:12]}"  # as labkit's client: the same replica every turn
    with OpenAI(base_url=base_url, api_key=client_key(), max_retries=0, default_headers=headers) as client:
        try:
            batches: list[list[Item]] = [[{"type": "message", "role": "user", "content": scenario.user}]]
            for _ in range(max(MAX_TURNS, scenario.turns)):
                history = [item for batch in batches for item in batch]
                response = client.responses.create(
                    model=model,
                    instructions=scenario.instructions,
                    tools=toolbox.specs,
                    input=history,  # type: ignore[arg-type]  # the SDK takes these dicts as they are
                    store=False,
                    metadata={SCENARIO_KEY: scenario.name},
                    prompt_cache_key=cache_key,
                )
                outputs = [replayable(item.model_dump(mode="json")) for item in response.output]
                results = [
                    {
                        "type": "function_call_output",
                        "call_id": o["call_id"],
                        "output": toolbox.run(o["name"], o["arguments"]),
                    }
                    for o in outputs
                    if o["type"] == "function_call"
                ]
                batches.append(outputs + results)
                if not results:
                    break
        finally:
            toolbox.close()
    return Conversation(scenario.instructions, list(toolbox.specs), batches)
