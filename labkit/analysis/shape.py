"""A rollout's sizes for the cost model: the system block, then each turn's new input and output.

``Shape.of`` plays a scenario's script once, its tools for real, and keeps only the sizes
that the cost model (``labkit.analysis.cost_model``) prices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from labkit.api.ids import new_id
from labkit.engine.policies import Call, Say, ScriptedPolicy
from labkit.engine.render import encode_block, item_block, system_block
from labkit.scenarios import Scenario
from labkit.text.tokenizer import encode_text


@dataclass(frozen=True)
class TurnShape:
    new_tokens: int  # rendered tokens of the items the client adds this turn
    new_items: int
    output_items: int
    output_tokens: int  # sampled tokens of the model's output
    output_block_tokens: int  # the output as rendered into the history (headers and markup too)
    tool_s: float = 0.0  # client time running the tools this turn calls


@dataclass(frozen=True)
class Shape:
    """A rollout's sizes: the system block, then each turn's new input and output.

    >>> from labkit.scenarios import synthetic
    >>> [t.output_items for t in Shape.of(synthetic(turns=3)).turns]
    [1, 1, 1]
    """

    system_tokens: int
    turns: tuple[TurnShape, ...]

    @classmethod
    def of(cls, scenario: Scenario) -> Shape:
        """The shape of a scenario's rollout.

        The tools really run: synthetic scenarios return their fixed size, file
        scenarios replay their calls on a sandbox copy (real tools, real outputs).
        """
        from labkit.client.agent import Toolbox

        tools = Toolbox(scenario)
        try:
            system = len(encode_block(*system_block(scenario.instructions, tools.specs)))
            policy = ScriptedPolicy.from_steps(scenario.steps)
            turns, new_items = [], [{"type": "message", "role": "user", "content": scenario.user}]
            step = 0
            while step < len(policy.steps):
                actions = policy.steps[step]
                outputs = [_output_item(a) for a in actions]
                calls = [o for o in outputs if o["type"] == "function_call"]
                out_tokens = sum(len(encode_text(item_block(i)[1])) for i in outputs)
                start = time.perf_counter()
                results = [tools.run(c["name"], c["arguments"]) for c in calls]
                tool_s = time.perf_counter() - start
                turns.append(
                    TurnShape(
                        new_tokens=sum(len(encode_block(*item_block(i))) for i in new_items),
                        new_items=len(new_items),
                        output_items=len(outputs),
                        output_tokens=out_tokens,
                        output_block_tokens=sum(len(encode_block(*item_block(i))) for i in outputs),
                        tool_s=tool_s,
                    )
                )
                new_items = [
                    {"type": "function_call_output", "call_id": c["call_id"], "output": r}
                    for c, r in zip(calls, results, strict=True)
                ]
                step += max(1, len(calls))  # the policy's next step: one on per tool result
            return cls(system, tuple(turns))
        finally:
            tools.close()


def _output_item(action: Say | Call) -> dict:
    """The output item an action becomes, with ids of the server's length."""
    if isinstance(action, Call):
        call_id = new_id("call")
        return {
            "type": "function_call",
            "name": action.name,
            "call_id": call_id,
            "arguments": action.arguments,
        }
    return {"type": "message", "role": "assistant", "content": action.text}
