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
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from labkit import limits

Item = dict[str, Any]


@dataclass(frozen=True)
class Say:
    """An assistant message with this text."""

    text: str


@dataclass(frozen=True)
class Call:
    """A function call with JSON-encoded arguments."""

    name: str
    arguments: str


Action = Say | Call


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

    def function_tools(self) -> list[Item]:
        return [t for t in self.tools if t.get("type") == "function"]


class Policy(Protocol):
    def act(self, ctx: TurnContext) -> list[Action]: ...


# ---------------------------------------------------------------- arguments from a schema


# Bounds on example arguments, whatever numbers a schema holds: a client's minItems of 1e30
# or minLength of a billion must not make the server build (or the model sample) more.
MAX_EXAMPLE_ITEMS = 8  # elements of one array
MAX_EXAMPLE_CHARS = 256  # characters of one string
MAX_EXAMPLE_DEPTH = 16  # nesting of the value
MAX_EXAMPLE_NODES = 2_000  # values in all


def example_value(schema: Any, name: str = "value") -> Any:
    """A value valid under a JSON schema, deterministic, and small whatever the schema says.

    Sizes are clamped (``MAX_EXAMPLE_*``): past them the value may not meet the schema,
    but it is built in bounded time. A malformed schema gives some value, never an error.

    >>> example_value({"type": "object", "properties": {"path": {"type": "string"},
    ...     "n": {"type": "integer", "minimum": 3}}, "required": ["path"]})
    {'path': 'path', 'n': 3}
    >>> len(example_value({"type": "array", "minItems": 1e30, "items": {"type": "string"}}))
    8
    """
    return _Example().value(schema, name, 0)


def _count(value: Any, default: int, cap: int) -> int:
    """A schema's count keyword as a whole number in ``0..cap`` (``default`` if it is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return min(default, cap)
    return max(0, min(int(min(value, cap)), cap))


class _Example:
    """One ``example_value`` call: a budget of values, so no schema costs more than a few."""

    def __init__(self) -> None:
        self.nodes = MAX_EXAMPLE_NODES

    def value(self, schema: Any, name: str, depth: int) -> Any:
        self.nodes -= 1
        if not isinstance(schema, dict):
            return name
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        spent = depth >= MAX_EXAMPLE_DEPTH or self.nodes <= 0
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options and not spent:
                return self.value(options[0], name, depth + 1)
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts and not spent:
            merged: dict[str, Any] = {}
            for sub in parts:
                if isinstance(sub, dict):
                    merged.update(sub)
            return self.value(merged, name, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and "properties" in schema):
            props = schema.get("properties")
            out: dict[str, Any] = {}
            for key, sub in (props if isinstance(props, dict) and not spent else {}).items():
                if self.nodes <= 0:
                    break
                out[key] = self.value(sub, key, depth + 1)
            return out
        if kind == "array":
            count = 0 if spent else max(1, _count(schema.get("minItems"), 1, MAX_EXAMPLE_ITEMS))
            out_items = []
            for _ in range(count):
                if self.nodes <= 0:
                    break
                out_items.append(self.value(schema.get("items", {}), name, depth + 1))
            return out_items
        if kind in ("integer", "number"):
            return _example_number(schema, integer=kind == "integer")
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return _example_string(schema, name)


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    """A bound and whether it is open: draft 2020's number form, or draft 4's boolean flag."""

    def number(value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return None
        return value

    flag = schema.get(exclusive)
    if isinstance(flag, bool):
        return number(schema.get(inclusive)), flag
    if number(flag) is not None:
        return number(flag), True
    return number(schema.get(inclusive)), False


def _example_number(schema: dict[str, Any], *, integer: bool) -> int | float:
    """0 if the bounds allow it, else the whole number nearest a bound, else a real in between.

    >>> _example_number({"minimum": 2.5}, integer=True), _example_number({"maximum": -1}, integer=False)
    (3, -1)
    """
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum")

    def fits(v: float) -> bool:
        above = low is None or v > low or (v == low and not low_open)
        below = high is None or v < high or (v == high and not high_open)
        return above and below

    whole = [0]
    if low is not None:
        whole.append(math.floor(low) + 1 if low_open else math.ceil(low))
    if high is not None:
        whole.append(math.ceil(high) - 1 if high_open else math.floor(high))
    for value in whole:
        if fits(value):
            # Whole numbers go out as JSON integers: clients often read "number" fields as ints.
            return int(value)
    if integer or low is None or high is None:
        return whole[-1]  # no integer in range: the schema cannot be met, say the nearest
    return (low + high) / 2


def _example_string(schema: dict[str, Any], name: str) -> str:
    """The field's name (or "x"), repeated or cut to fit minLength and maxLength (at most 256)."""
    text = name or "x"
    min_len = _count(schema.get("minLength"), 0, MAX_EXAMPLE_CHARS)
    max_len = _count(schema.get("maxLength"), max(min_len, len(text)), MAX_EXAMPLE_CHARS)
    length = min(max(len(text), min_len), max_len)
    return (text * (length // len(text) + 1))[:length]


# ---------------------------------------------------------------- the generic policy

PASSAGE = (
    "An agent loop alternates between the model and the client. The model picks an "
    "action, the client runs a tool, and the result goes back for the next turn. Each "
    "turn pays for three things: the API service around the model, inference on the "
    "accelerator, and the client's own tools. When decoding was slow, inference hid "
    "the service's cost; once decoding reached a thousand tokens a second, the "
    "service became the part worth optimizing. Keeping one connection open and "
    "caching the previous response's state lets the service process only what is "
    "new in each turn. "
)
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
# What the generic policy writes at most in one answer, whatever the client asks for
# (``labkit serve --max-output-tokens``): the work before the first token stays bounded.
DEFAULT_MAX_OUTPUT_TOKENS = limits.MAX_OUTPUT_TOKENS


def leading_sentences(max_chars: int) -> str:
    """The passage's first sentences, as many as fit in ``max_chars`` (always at least one).

    Whole sentences only, so a fixed answer never stops mid-word.

    >>> leading_sentences(80)
    'An agent loop alternates between the model and the client.'
    >>> leading_sentences(0) == leading_sentences(80)
    True
    """
    sentences = re.split(r"(?<=\.)\s+", PASSAGE.strip())
    text = sentences[0]
    for sentence in sentences[1:]:
        longer = f"{text} {sentence}"
        if len(longer) > max_chars:
            break
        text = longer
    return text


def text_of_tokens(count: int) -> str:
    """Text that tokenizes to exactly ``count`` tokens and ends a sentence.

    The passage is cut into the tokenizer's own pre-token pieces and only
    one-token pieces are kept, so any number of them re-tokenizes to that number.
    The last piece is always ".", and for ``count >= 2`` the piece before it
    is a word, so the text ends at a word and a sentence boundary. ``count == 1``
    gives just "."; ``count <= 0`` gives "".

    >>> from labkit.engine.tokenizer import encode_text
    >>> [len(encode_text(text_of_tokens(n))) for n in (1, 7, 300)]
    [1, 7, 300]
    >>> text_of_tokens(7)
    'An agent loop between the model.'
    """
    if count <= 0:
        return ""
    pieces = _one_token_pieces()
    # Cycle through the passage for count - 2 pieces, then the next word piece,
    # then ".". Skipping punctuation to reach that word keeps two punctuation
    # pieces from meeting at the end, where they would merge into other tokens.
    # Whole cycles are one string repeated (a long answer costs no loop per token).
    cycles, rest = divmod(max(0, count - 2), len(pieces))
    body = [_passage_cycle() * cycles, *pieces[:rest]]
    if count >= 2:
        i = count - 2
        while not _is_word(pieces[i % len(pieces)]):
            i += 1
        body.append(pieces[i % len(pieces)])
    body.append(".")
    return "".join(body).lstrip()  # the first piece's leading space (pieces are never blank)


def _is_word(piece: str) -> bool:
    """A piece of letters, with at most a leading space: ``" model"`` yes, ``"'s"`` no."""
    return piece.lstrip(" ").isalpha()


@lru_cache(maxsize=1)
def _passage_cycle() -> str:
    return "".join(_one_token_pieces())


@lru_cache(maxsize=1)
def _one_token_pieces() -> tuple[str, ...]:
    import regex

    from labkit.engine.tokenizer import PAT_STR, encode_text

    pieces = regex.findall(PAT_STR, " " + PASSAGE.strip())
    return tuple(p for p in pieces if len(encode_text(p)) == 1 and p.strip())


@dataclass
class GenericPolicy:
    """Calls offered function tools up to ``max_tool_calls`` times a user turn, then answers."""

    max_tool_calls: int = 3
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS  # the longest answer it writes

    def act(self, ctx: TurnContext) -> list[Action]:
        call = self._choose_call(ctx)
        if call is not None:
            return [call]
        return [Say(self._answer(ctx))]

    def _choose_call(self, ctx: TurnContext) -> Call | None:
        tools = ctx.function_tools()
        choice = ctx.tool_choice
        if not tools or choice == "none":
            return None
        done = sum(1 for i in ctx.since_last_user() if i.get("type") == "function_call")
        if isinstance(choice, dict) and choice.get("type") == "function":
            named = [t for t in tools if t.get("name") == choice.get("name")]
            tools = named or tools
        elif choice != "required" and done >= self.max_tool_calls:
            return None
        tool = tools[done % len(tools)]
        args = example_value(tool.get("parameters") or {"type": "object"})
        return Call(name=str(tool.get("name")), arguments=json.dumps(args))

    def _answer(self, ctx: TurnContext) -> str:
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

    steps: list[list[Action]]

    @classmethod
    def from_steps(cls, raw: list[dict[str, Any]]) -> ScriptedPolicy:
        steps = []
        for step in raw:
            actions: list[Action] = []
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

    def act(self, ctx: TurnContext) -> list[Action]:
        done = sum(1 for i in ctx.since_last_user() if i.get("type") == "function_call_output")
        return list(self.steps[min(done, len(self.steps) - 1)])
