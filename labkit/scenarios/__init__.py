"""Scenarios: scripted agent rollouts, as data.

A scenario file in ``data/scenarios/NAME.json`` names the instructions, the
user's request, the repository the tools work on, and the steps the scripted
model takes. The server replays the steps (``metadata.labkit_scenario``);
the client runs the real tools those steps call.

A synthetic scenario is generated from a few numbers instead, for what-ifs:
``synthetic:turns=20,output_tokens=60,tool_tokens=1000,instruction_tokens=8000``.
Its tool, ``fetch``, returns ``tool_tokens`` tokens of text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.text.passage import text_of_tokens

DEFAULT_SCENARIO = "fix-failing-test"  # the scripted task a rollout runs unless told otherwise
SYNTHETIC = "synthetic"
SYNTHETIC_DEFAULTS = {"turns": 20, "output_tokens": 60, "tool_tokens": 1000, "instruction_tokens": 8000}
# The largest value of each parameter: a scenario is built on the server from a name any
# client can send, so its size must not be whatever number the name holds.
SYNTHETIC_MAX = {
    "turns": 1_000,
    "output_tokens": 16_384,
    "tool_tokens": 1_000_000,
    "instruction_tokens": 262_144,
}
# A scenario file's name: no path separators, no dot first, short enough for any file system.
SCENARIO_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
FETCH_TOOL = {
    "type": "function",
    "name": "fetch",
    "description": "Fetch the next chunk of context the task needs.",
    "parameters": {
        "type": "object",
        "properties": {"note": {"type": "string", "description": "What to fetch and why."}},
        "required": ["note"],
        "additionalProperties": False,
    },
    "strict": True,
}


class ScenarioNotFound(LookupError):
    pass


@dataclass
class Scenario:
    name: str
    description: str
    instructions: str
    user: str
    steps: list[dict[str, Any]]
    repo: Path | None = None  # the repository the real tools work on (a copy of it)
    tools: list[dict[str, Any]] = field(default_factory=list)  # specs for synthetic scenarios
    params: dict[str, int] = field(default_factory=dict)
    tool_outputs: Path | None = None  # a replay's recorded tool outputs (JSON Lines, in call order)

    @property
    def turns(self) -> int:
        return len(self.steps)


def synthetic(
    turns: int = SYNTHETIC_DEFAULTS["turns"],
    output_tokens: int = SYNTHETIC_DEFAULTS["output_tokens"],
    tool_tokens: int = SYNTHETIC_DEFAULTS["tool_tokens"],
    instruction_tokens: int = SYNTHETIC_DEFAULTS["instruction_tokens"],
) -> Scenario:
    """A generated rollout: ``turns - 1`` calls to ``fetch``, then a final answer.

    Each call's arguments and the final answer are about ``output_tokens`` long.

    >>> s = synthetic(turns=3, output_tokens=20)
    >>> s.name
    'synthetic:turns=3,output_tokens=20,tool_tokens=1000,instruction_tokens=8000'
    >>> [sorted(step) for step in s.steps]
    [['call'], ['call'], ['say']]
    """
    if turns < 1 or output_tokens < 1 or tool_tokens < 0 or instruction_tokens < 0:
        raise ValueError("synthetic scenarios need turns >= 1, output_tokens >= 1 and sizes >= 0")
    params = {
        "turns": turns,
        "output_tokens": output_tokens,
        "tool_tokens": tool_tokens,
        "instruction_tokens": instruction_tokens,
    }
    for key, value in params.items():
        if value > SYNTHETIC_MAX[key]:
            raise ValueError(f"synthetic scenarios take {key} up to {SYNTHETIC_MAX[key]}")
    # {"note": "..."} costs 6 tokens around the note.
    note = text_of_tokens(max(1, output_tokens - 6))
    steps: list[dict[str, Any]] = [{"call": {"name": "fetch", "arguments": {"note": note}}}] * (turns - 1)
    steps.append({"say": text_of_tokens(output_tokens)})
    name = f"{SYNTHETIC}:" + ",".join(f"{k}={v}" for k, v in params.items())
    return Scenario(
        name=name,
        description="A generated rollout for what-ifs.",
        instructions=text_of_tokens(instruction_tokens),
        user="Work through the task, fetching what you need.",
        steps=steps,
        tools=[FETCH_TOOL],
        params=params,
    )


def parse_synthetic(name: str) -> Scenario:
    """``synthetic:turns=5,tool_tokens=200`` -> the scenario (defaults for what is not given)."""
    _, _, spec = name.partition(":")
    params = dict(SYNTHETIC_DEFAULTS)
    for part in filter(None, spec.split(",")):
        key, _, value = part.partition("=")
        # ASCII digits only, and few of them: int() of a thousand digits is an error, not a size.
        if key not in params or not re.fullmatch(r"[0-9]{1,9}", value):
            shown = part if len(part) <= 40 else part[:40] + "…"
            raise ScenarioNotFound(f"bad synthetic scenario parameter '{shown}' (known: {', '.join(params)})")
        params[key] = int(value)
    return synthetic(**params)


def load_scenario(name: str, data_dir: Path) -> Scenario:
    """A scenario by name: a file in ``data_dir/scenarios``, or ``synthetic:...``."""
    if name == SYNTHETIC or name.startswith(f"{SYNTHETIC}:"):
        return parse_synthetic(name)
    if not SCENARIO_NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise ScenarioNotFound(f"Scenario '{shown}' not found.")
    path = data_dir / "scenarios" / f"{name}.json"
    if not path.is_file():
        raise ScenarioNotFound(f"Scenario '{name}' not found.")
    raw = json.loads(path.read_text())
    instructions = ""
    if raw.get("instructions_file"):
        instructions = (data_dir / raw["instructions_file"]).read_text()
    return Scenario(
        name=name,
        description=raw.get("description", ""),
        instructions=instructions,
        user=raw.get("user", ""),
        steps=raw["steps"],
        repo=data_dir / raw["repo"] if raw.get("repo") else None,
    )
