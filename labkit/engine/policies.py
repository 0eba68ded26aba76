"""Policies decide what the simulated model says; the engine decides how fast.

A policy sees the whole conversation of a turn and returns the output items to
sample, as plain text and JSON. Two policies:

- ``GenericPolicy`` serves any client: with function tools on offer it calls
  them (schema-valid arguments) a bounded number of times, then answers in text.
- ``ScriptedPolicy`` replays a scenario: step ``k`` is chosen by how many tool
  results the conversation holds since its last user message, so the same
  conversation always gets the same next action.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from labkit import limits
from labkit.api.compaction import task_calls
from labkit.api.items import Item
from labkit.engine.arguments import example_value
from labkit.text.passage import leading_sentences, text_of_tokens


@dataclass(frozen=True)
class Say:
    """An assistant message with this text."""

    text: str


@dataclass(frozen=True)
class Call:
    """A function call with JSON-encoded arguments."""

    name: str
    arguments: str


ModelAction = Say | Call  # what the scripted model does next (the connection core has its own Action)


@dataclass
class TurnContext:
    """What a policy may look at: the conversation so far and the request's settings."""

    items: Sequence[Item]
    tools: Sequence[Item] = ()
    tool_choice: Any = "auto"
    max_output_tokens: int | None = None

    def since_last_user(self) -> list[Item]:
        last = -1
        for i, item in enumerate(self.items):
            if item.get("type", "message") == "message" and item.get("role") == "user":
                last = i
        return list(self.items[last + 1 :])

    def last_user_text(self) -> str:
        from labkit.engine.render import content_text

        for item in reversed(self.items):
            if item.get("type", "message") == "message" and item.get("role") == "user":
                return content_text(item.get("content"))
        return ""

    def redirected(self) -> bool:
        """Whether the latest user message cut into an answer: it follows an assistant message
        left ``incomplete`` (a steered response's, as its successor sees the conversation)."""
        for item in reversed(self.items):
            kind, role = item.get("type", "message"), item.get("role")
            if kind == "message" and role == "user":
                continue
            return kind == "message" and role == "assistant" and item.get("status") == "incomplete"
        return False

    def calls_for_last_user(self) -> int:
        """The function calls made since the last user message: those in the conversation, and
        those a compaction item after it stands for (the calls it replaced are still made)."""
        return sum(
            1 if item.get("type") == "function_call" else task_calls(item)
            for item in self.since_last_user()
            if item.get("type") in ("function_call", "compaction")
        )

    def function_tools(self) -> list[Item]:
        return [t for t in self.tools if t.get("type") == "function"]


class Policy(Protocol):
    def act(self, ctx: TurnContext) -> list[ModelAction]: ...


# ---------------------------------------------------------------- the generic policy

LONG_WORDS = re.compile(r"\b(long|essay|at length|as long as)\b", re.IGNORECASE)
# The lookbehind starts a number only at its first digit: without it, a long run of digits
# is tried from every position, which is quadratic in its length.
TOKEN_TARGET = re.compile(r"(?<![\d,_])(\d[\d,_]*)\s*(?:output\s+)?tokens?\b", re.IGNORECASE)
# The same two patterns, fast on ASCII text (a pasted megabyte would otherwise keep the event
# loop for ~0.1 s): lower-case once, then case-sensitive patterns that start with a literal or a
# digit, so the regex engine skips to candidate positions; for ASCII, lower-casing is exact.
# A property test checks they match exactly where the patterns above match.
_LONG_ASCII = [
    re.compile(p) for p in (r"long(?<!\wlong)\b", r"essay(?<!\wessay)\b", r"at length(?<!\wat length)\b")
]
_TARGET_ASCII = re.compile(r"(\d(?<![\d,_]\d)[\d,_]*)\s*(?:output\s+)?tokens?\b")


def asks_for_long(text: str) -> bool:
    """``LONG_WORDS.search(text)``, fast ("as long as" is "long" with words around it)."""
    if not text.isascii():
        return LONG_WORDS.search(text) is not None
    lowered = text.lower()
    return any(p.search(lowered) for p in _LONG_ASCII)


def token_target(text: str) -> str | None:
    """The number in ``TOKEN_TARGET.search(text)``, if any ("Write 4,000 tokens." -> "4,000"), fast."""
    if not text.isascii():
        found = TOKEN_TARGET.search(text)
    else:
        lowered = text.lower()
        found = _TARGET_ASCII.search(lowered) if "token" in lowered else None
    return found.group(1) if found else None


DEFAULT_LONG_TOKENS = 2048


@dataclass
class GenericPolicy:
    """Calls offered function tools up to ``max_tool_calls`` times a user turn, then answers."""

    max_tool_calls: int = 3
    # The longest answer it writes, whatever the client asks for (``labkit serve
    # --max-output-tokens``): the work before the first token stays bounded.
    max_output_tokens: int = limits.MAX_OUTPUT_TOKENS

    def act(self, ctx: TurnContext) -> list[ModelAction]:
        call = self._choose_call(ctx)
        if call is not None:
            return [call]
        return [Say(self._answer(ctx))]

    def _choose_call(self, ctx: TurnContext) -> Call | None:
        tools = ctx.function_tools()
        choice = ctx.tool_choice
        if not tools or choice == "none":
            return None
        done = ctx.calls_for_last_user()
        if isinstance(choice, dict) and choice.get("type") == "function":
            named = [t for t in tools if t.get("name") == choice.get("name")]
            tools = named or tools
        elif choice != "required" and done >= self.max_tool_calls:
            return None
        tool = tools[done % len(tools)]
        args = example_value(tool.get("parameters") or {"type": "object"})
        return Call(name=str(tool.get("name")), arguments=json.dumps(args))

    def _answer(self, ctx: TurnContext) -> str:
        if ctx.redirected():  # visibly answer the correction that cut the last answer short
            asked = " ".join(ctx.last_user_text().split())
            quote = asked if len(asked) <= 120 else asked[:119] + "…"
            return f'Changing course, as you asked: "{quote}" ' + self._reply(ctx)
        return self._reply(ctx)

    def _reply(self, ctx: TurnContext) -> str:
        asked = ctx.last_user_text()
        cap = self.max_output_tokens
        target = token_target(asked)
        if target:
            digits = re.sub(r"[,_]", "", target)
            # A number of thousands of digits is just "more than the cap", never parsed whole.
            return text_of_tokens(min(int(digits) if len(digits) <= 9 else cap, cap))
        if asks_for_long(asked):
            # Longer than any budget the request set, so it runs on until max_output_tokens stops it.
            wanted = max(DEFAULT_LONG_TOKENS, min(ctx.max_output_tokens or 0, cap) + 1)
            return text_of_tokens(min(wanted, cap))
        results = [i for i in ctx.since_last_user() if i.get("type") == "function_call_output"]
        if results:
            return f"Done. I called {len(results)} tool(s) and read their results. " + leading_sentences(120)
        return "Hello from labkit's simulated model. " + leading_sentences(160)


# ---------------------------------------------------------------- the scripted policy


@dataclass
class ScriptedPolicy:
    """Replays a scenario: a list of steps, each a list of actions.

    A step is ``{"say": "..."}``, ``{"call": {"name": ..., "arguments": {...}}}``
    or both (reasoning text, then the call); ``"calls": [...]`` instead of ``"call"``
    makes several calls in one turn (a replayed session's parallel calls).
    """

    steps: list[list[ModelAction]]

    @classmethod
    def from_steps(cls, raw: list[dict[str, Any]]) -> ScriptedPolicy:
        steps = []
        for step in raw:
            actions: list[ModelAction] = []
            if "say" in step:
                actions.append(Say(str(step["say"])))
            calls = [step["call"]] if "call" in step else list(step.get("calls", []))
            for call in calls:
                args = call.get("arguments", {})
                encoded = args if isinstance(args, str) else json.dumps(args)
                actions.append(Call(name=call["name"], arguments=encoded))
            if not actions:
                raise ValueError(f"scenario step needs 'say' or 'call': {step}")
            # A step of k calls is answered by k tool results: the next step is k places on.
            steps.extend([actions] * max(1, len(calls)))
        if not steps:
            raise ValueError("a scenario needs at least one step")
        return cls(steps)

    def act(self, ctx: TurnContext) -> list[ModelAction]:
        done = sum(1 for i in ctx.since_last_user() if i.get("type") == "function_call_output")
        return list(self.steps[min(done, len(self.steps) - 1)])
