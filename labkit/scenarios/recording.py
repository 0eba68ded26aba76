"""What a recorded agent session holds, whichever recorder wrote it: its turns, and how it fails.

Two readers yield these turns as a recording is read: ``labkit.scenarios.codex_session`` (a
Codex CLI session) and ``labkit.scenarios.transcript`` (request/response pairs);
``labkit.scenarios.replay`` plays them again as a scenario.

>>> RecordedTurn(4, calls=[call_of({"type": "function_call", "call_id": "c1", "name": "ls"})]).calls
[('c1', 'ls', '')]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from labkit.engine.render import content_text
from labkit.text.passage import text_of_tokens

CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output"}


class ReplayError(ValueError):
    """A recording that cannot be replayed: one line, naming the line and what was expected.

    >>> str(ReplayError(3, "a JSON object"))
    'line 3: expected a JSON object'
    """

    def __init__(self, line: int, expected: str) -> None:
        super().__init__(f"line {line}: expected {expected}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Usage:
    """One response's tokens, as the recording says the server counted them."""

    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0


@dataclass
class RecordedTurn:
    """One response of the recording: what the model said and called, and what the tools returned."""

    line: int
    text: str = ""  # the assistant's message text, if any
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (call_id, name, arguments)
    outputs: dict[str, str] = field(default_factory=dict)  # by call_id
    usage: Usage | None = None

    def take(self, item: dict[str, Any]) -> None:
        """One item the model sampled: a call joins the calls, a message's text the text.

        >>> turn = RecordedTurn(1)
        >>> turn.take({"type": "message", "content": "Hi."}); turn.take({"type": "reasoning"})
        >>> turn.text, turn.calls
        ('Hi.', [])
        """
        kind = item.get("type")
        if kind in CALLS:
            self.calls.append(call_of(item))
        elif kind == "message":
            self.text = " ".join(t for t in (self.text, content_text(item.get("content"))) if t)

    def step(self) -> dict[str, Any]:
        """The scenario step that says and calls what this turn did.

        >>> RecordedTurn(1, "Done.", usage=Usage(10, 0, 2, reasoning_tokens=3)).step()
        {'say': 'An agent. Done.'}
        """
        hidden = text_of_tokens(self.usage.reasoning_tokens) if self.usage else ""
        say = " ".join(t for t in (hidden, self.text) if t)
        step: dict[str, Any] = {"say": say} if say else {}
        calls = [{"name": name, "arguments": args} for _, name, args in self.calls]
        if len(calls) == 1:
            step["call"] = calls[0]
        elif calls:
            step["calls"] = calls
        return step or {"say": "."}


@dataclass
class Opening:
    """What the recording's first request held besides its turns."""

    instructions: str
    user: str
    tools: list[dict[str, Any]] | None  # None: not recorded (a Codex session)


def output_text(output: Any) -> str:
    """A tool output as the model read it: a string, content parts, or Codex's ``{content}`` object."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return content_text(output)
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]
    return json.dumps(output)


def call_of(item: dict[str, Any]) -> tuple[str, str, str]:
    """A call item as ``(call_id, name, arguments)``, whichever kind of call it is."""
    kind = item["type"]
    call_id = str(item.get("call_id") or item.get("id") or "")
    if kind == "custom_tool_call":
        return call_id, str(item.get("name")), str(item.get("input", ""))
    if kind == "local_shell_call":
        return call_id, "local_shell", json.dumps(item.get("action", {}))
    return call_id, str(item.get("name")), str(item.get("arguments", ""))
