"""Policies: schema-valid arguments, the generic policy's bounded tool calls, the scripted replay."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from labkit.engine.arguments import example_value
from labkit.engine.policies import (
    DEFAULT_LONG_TOKENS,
    LONG_WORDS,
    TOKEN_TARGET,
    Call,
    GenericPolicy,
    Say,
    ScriptedPolicy,
    TurnContext,
    asks_for_long,
    token_target,
)
from labkit.text.passage import PASSAGE, leading_sentences, text_of_tokens
from labkit.text.tokenizer import encode_text

pytestmark = pytest.mark.slow  # property searches

Item = dict[str, Any]

# ---------------------------------------------------------------- example_value

names = st.text(max_size=10)
bounds = st.integers(-100, 100) | st.integers(-400, 400).map(lambda q: q / 4)  # whole and fractional


@st.composite
def strings(draw: st.DrawFn) -> dict:
    schema = draw(
        st.fixed_dictionaries(
            {"type": st.just("string")},
            optional={"minLength": st.integers(0, 30), "maxLength": st.integers(0, 30)},
        )
    )
    assume(schema.get("minLength", 0) <= schema.get("maxLength", 30))
    return schema


@st.composite
def numbers(draw: st.DrawFn) -> dict:
    """An integer or number schema with any mix of (exclusive) bounds that some value meets."""
    kind = draw(st.sampled_from(["integer", "number"]))
    schema: dict[str, Any] = {"type": kind}
    low, high = draw(st.none() | bounds), draw(st.none() | bounds)
    low_open, high_open = draw(st.booleans()), draw(st.booleans())
    if low is not None:
        schema["exclusiveMinimum" if low_open else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if high_open else "maximum"] = high
    if kind == "integer":
        first = -math.inf if low is None else math.floor(low) + 1 if low_open else math.ceil(low)
        last = math.inf if high is None else math.ceil(high) - 1 if high_open else math.floor(high)
        assume(first <= last)
    elif low is not None and high is not None:
        assume(low < high or (low == high and not low_open and not high_open))
    return schema


booleans = st.just({"type": "boolean"})
enums = st.fixed_dictionaries(
    {"enum": st.lists(st.text(max_size=5) | st.integers(), min_size=1, max_size=4, unique=True)},
    optional={"description": st.text(max_size=10)},
)
nullable = st.builds(dict, type=st.just(["string", "null"]))
leaves = st.one_of(strings(), numbers(), booleans, enums, nullable)


def containers(inner: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    arrays = st.fixed_dictionaries(
        {"type": st.just("array"), "items": inner}, optional={"minItems": st.integers(0, 4)}
    )
    objects = st.dictionaries(names, inner, max_size=4).flatmap(
        lambda props: st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.just(props)},
            optional={
                "required": st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
                "additionalProperties": st.just(False),
            },
        )
    )
    return arrays | objects


schemas = st.recursive(leaves, containers, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(schemas)
def test_example_value_is_valid_under_the_schema(schema: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    value = example_value(schema)
    jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)
    assert example_value(schema) == value  # deterministic
    json.dumps(value)  # and JSON-ready


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}},
        {"type": "number", "exclusiveMinimum": 0.5},
        {"type": "integer", "exclusiveMinimum": 7},
        {"type": "string", "minLength": 12},
        {"type": "array", "items": {"type": "integer"}, "minItems": 3},
        {"const": "fixed"},
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"oneOf": [{"type": "boolean"}]},
        {"allOf": [{"type": "object"}, {"properties": {"x": {"type": "string"}}, "required": ["x"]}]},
        {"properties": {"q": {"type": "string"}}, "required": ["q"]},  # an object without "type"
        {"type": ["null", "integer"], "minimum": 2},
        {"type": "null"},
        {},
    ],
)
def test_example_value_handles_common_keywords(schema: dict) -> None:
    jsonschema.validate(example_value(schema), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"country_code": {"type": "string", "maxLength": 2}}},
        {"type": "integer", "maximum": -1},
        {"type": "number", "exclusiveMaximum": -3},
        {"type": "integer", "minimum": 5, "maximum": 5},
        {"type": "number", "exclusiveMinimum": 0.25, "exclusiveMaximum": 0.5},
        {"type": "string", "minLength": 3, "maxLength": 3},
    ],
)
def test_example_value_respects_upper_bounds(schema: dict) -> None:
    jsonschema.validate(example_value(schema), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"": {"type": "string", "minLength": 1}}},
        {"type": "integer", "minimum": 2.5},
        {"type": "integer", "exclusiveMinimum": 2.5},
    ],
)
def test_example_value_edge_cases(schema: dict) -> None:
    jsonschema.validate(example_value(schema), schema, cls=jsonschema.Draft202012Validator)


# ---------------------------------------------------------------- the generic policy

READ = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
LS = {"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}}
WEB = {"type": "web_search"}
TOOLS = [READ, LS]


def user(text: str) -> Item:
    return {"type": "message", "role": "user", "content": text}


def call_and_output(n: int, name: str = "read_file") -> list[Item]:
    return [
        {"type": "function_call", "call_id": f"call_{n}", "name": name, "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": "ok"},
    ]


def run_agent(policy: GenericPolicy, ctx_kwargs: dict[str, Any], limit: int = 20) -> list[Call | Say]:
    """Play the loop: act, and for a call append it and its output, until the policy says text."""
    items: list[Item] = [user("Look around the repository.")]
    actions: list[Call | Say] = []
    for n in range(limit):
        [action] = policy.act(TurnContext(items=items, **ctx_kwargs))
        actions.append(action)
        if isinstance(action, Say):
            break
        items += call_and_output(n, action.name)
    return actions


def assert_valid_call(action: Call | Say, tools: list[Item]) -> None:
    assert isinstance(action, Call)
    [tool] = [t for t in tools if t["name"] == action.name]
    jsonschema.validate(json.loads(action.arguments), tool["parameters"])


@pytest.mark.parametrize("max_tool_calls", [0, 1, 3, 5])
def test_auto_calls_up_to_the_bound_then_answers(max_tool_calls: int) -> None:
    actions = run_agent(GenericPolicy(max_tool_calls=max_tool_calls), {"tools": TOOLS})
    assert len(actions) == max_tool_calls + 1
    for action in actions[:-1]:
        assert_valid_call(action, TOOLS)
    assert [a.name for a in actions[:-1]] == [TOOLS[i % 2]["name"] for i in range(max_tool_calls)]
    assert isinstance(actions[-1], Say)
    assert actions[-1].text


def test_the_bound_counts_calls_since_the_last_user_message() -> None:
    policy = GenericPolicy(max_tool_calls=2)
    spent = [user("first task"), *call_and_output(0), *call_and_output(1)]
    assert isinstance(policy.act(TurnContext(items=spent, tools=TOOLS))[0], Say)
    fresh = [*spent, {"type": "message", "role": "assistant", "content": "done"}, user("next task")]
    assert isinstance(policy.act(TurnContext(items=fresh, tools=TOOLS))[0], Call)
    # an item without "type" is a message too
    fresh_untyped = [*spent, {"role": "user", "content": "next task"}]
    assert isinstance(policy.act(TurnContext(items=fresh_untyped, tools=TOOLS))[0], Call)


def test_tool_choice_none_answers_in_text() -> None:
    [action] = GenericPolicy().act(TurnContext(items=[user("hi")], tools=TOOLS, tool_choice="none"))
    assert isinstance(action, Say)


def test_without_function_tools_it_answers_in_text() -> None:
    for tools in ([], [WEB]):
        [action] = GenericPolicy().act(TurnContext(items=[user("hi")], tools=tools))
        assert isinstance(action, Say)


def test_required_always_calls() -> None:
    policy = GenericPolicy(max_tool_calls=2)
    actions = run_agent(policy, {"tools": TOOLS, "tool_choice": "required"}, limit=6)
    assert len(actions) == 6
    for action in actions:
        assert_valid_call(action, TOOLS)


def test_a_named_tool_choice_calls_that_tool() -> None:
    choice = {"type": "function", "name": "ls"}
    policy = GenericPolicy(max_tool_calls=2)
    actions = run_agent(policy, {"tools": TOOLS, "tool_choice": choice}, limit=4)
    assert [a.name for a in actions if isinstance(a, Call)] == ["ls"] * 4
    for action in actions:
        assert_valid_call(action, TOOLS)


def test_a_call_without_parameters_gets_an_empty_object() -> None:
    tool = {"type": "function", "name": "now"}
    [action] = GenericPolicy().act(TurnContext(items=[user("what time is it")], tools=[tool]))
    assert action == Call(name="now", arguments="{}")


@pytest.mark.parametrize(
    ("ask", "count"),
    [
        ("Write 300 tokens about caching.", 300),
        ("Reply with exactly 1 token", 1),
        ("I need 1,000 output tokens of text.", 1000),
        ("give me 4_000 tokens", 4000),
    ],
)
def test_a_token_count_in_the_ask_gives_exactly_that_many_tokens(ask: str, count: int) -> None:
    [action] = GenericPolicy().act(TurnContext(items=[user(ask)]))
    assert isinstance(action, Say)
    assert len(encode_text(action.text)) == count


@pytest.mark.parametrize("max_output_tokens", [16, 500, 2048, 5000])
def test_a_long_ask_outruns_max_output_tokens(max_output_tokens: int) -> None:
    # the engine stops sampling at the budget, so the response holds exactly max_output_tokens tokens
    ctx = TurnContext(items=[user("Write a long essay on latency.")], max_output_tokens=max_output_tokens)
    [action] = GenericPolicy().act(ctx)
    assert isinstance(action, Say)
    ids = encode_text(action.text)
    assert len(ids) > max_output_tokens
    assert len(ids[:max_output_tokens]) == max_output_tokens


def test_a_long_ask_without_a_limit_uses_the_default_length() -> None:
    [action] = GenericPolicy().act(TurnContext(items=[user("Explain it at length.")]))
    assert isinstance(action, Say)
    assert len(encode_text(action.text)) == DEFAULT_LONG_TOKENS


@pytest.mark.parametrize("count", [1, 2, 7, 113, 114, 300, 1500])
def test_text_of_tokens_is_exact(count: int) -> None:
    assert len(encode_text(text_of_tokens(count))) == count


def test_text_of_tokens_is_exact_and_ends_a_sentence_for_every_count() -> None:
    # 1..600 spans several cycles of the passage, so every position of the cycle ends a text
    for count in [*range(1, 601), 1024, 2049, 4000, 5001]:
        text = text_of_tokens(count)
        assert len(encode_text(text)) == count, count
        assert text.endswith("."), count
        assert text == text.lstrip(), count
        if count >= 2:
            # a whole word right before the period: no cut word, no doubled punctuation
            assert re.search(r"(?:^| )[A-Za-z]+\.$", text), (count, text[-30:])


def test_text_of_tokens_of_one_and_zero() -> None:
    assert text_of_tokens(1) == "."
    assert text_of_tokens(0) == ""


def passage_sentences() -> list[str]:
    return re.split(r"(?<=\.)\s+", PASSAGE.strip())


def assert_whole_passage_sentences(text: str) -> None:
    """``text`` is one or more of the passage's sentences from its start, nothing cut."""
    sentences = passage_sentences()
    taken = re.split(r"(?<=\.)\s+", text)
    assert taken == sentences[: len(taken)]


def test_the_hello_answer_is_whole_sentences() -> None:
    [action] = GenericPolicy().act(TurnContext(items=[user("Say hello.")]))
    assert isinstance(action, Say)
    greeting = "Hello from labkit's simulated model. "
    assert action.text.startswith(greeting)
    assert action.text.endswith(".")
    assert_whole_passage_sentences(action.text.removeprefix(greeting))


def test_the_answer_after_tool_results_is_whole_sentences() -> None:
    items = [user("Look around."), *call_and_output(0), *call_and_output(1)]
    [action] = GenericPolicy(max_tool_calls=2).act(TurnContext(items=items, tools=TOOLS))
    assert isinstance(action, Say)
    lead = "Done. I called 2 tool(s) and read their results. "
    assert action.text.startswith(lead)
    assert action.text.endswith(".")
    assert_whole_passage_sentences(action.text.removeprefix(lead))


@pytest.mark.parametrize("max_chars", [0, 59, 60, 120, 160, 10_000])
def test_leading_sentences_fit_the_budget_when_they_can(max_chars: int) -> None:
    text = leading_sentences(max_chars)
    assert_whole_passage_sentences(text)
    first = passage_sentences()[0]
    assert len(text) <= max(max_chars, len(first))
    assert leading_sentences(10_000) == PASSAGE.strip()


def test_the_generic_policy_is_deterministic() -> None:
    ctx = TurnContext(items=[user("Look around."), *call_and_output(0)], tools=TOOLS)
    assert GenericPolicy().act(ctx) == GenericPolicy().act(ctx)


# ---------------------------------------------------------------- the scripted policy

SCENARIO = [
    {"call": {"name": "ls", "arguments": {"path": "."}}},
    {"say": "Reading the README.", "call": {"name": "read_file", "arguments": '{"path": "README.md"}'}},
    {"say": "All done."},
]


def test_scripted_steps_parse_into_actions() -> None:
    policy = ScriptedPolicy.from_steps(SCENARIO)
    assert policy.steps == [
        [Call("ls", '{"path": "."}')],
        [Say("Reading the README."), Call("read_file", '{"path": "README.md"}')],
        [Say("All done.")],
    ]


@pytest.mark.parametrize("raw", [[], [{}], [{"say": "ok"}, {"note": "neither say nor call"}]])
def test_a_bad_scenario_is_rejected(raw: list[dict]) -> None:
    with pytest.raises(ValueError):
        ScriptedPolicy.from_steps(raw)


def test_step_k_follows_the_tool_results_since_the_last_user_message() -> None:
    policy = ScriptedPolicy.from_steps(SCENARIO)
    items: list[Item] = [user("old task"), *call_and_output(90), user("Summarize the repo.")]
    seen = []
    for n in range(5):
        seen.append(policy.act(TurnContext(items=list(items))))
        items += call_and_output(n)
    assert seen == [policy.steps[0], policy.steps[1], policy.steps[2], policy.steps[2], policy.steps[2]]


def test_only_tool_results_advance_the_script() -> None:
    policy = ScriptedPolicy.from_steps(SCENARIO)
    items = [
        user("go"),
        {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant", "content": "thinking"},
    ]
    assert policy.act(TurnContext(items=items)) == policy.steps[0]


def test_a_new_user_message_restarts_the_script() -> None:
    policy = ScriptedPolicy.from_steps(SCENARIO)
    items = [user("go"), *call_and_output(0), *call_and_output(1), user("again")]
    assert policy.act(TurnContext(items=items)) == policy.steps[0]


def test_the_scripted_policy_is_deterministic() -> None:
    items = [user("go"), *call_and_output(0)]
    first = ScriptedPolicy.from_steps(SCENARIO).act(TurnContext(items=items))
    again = ScriptedPolicy.from_steps(SCENARIO).act(TurnContext(items=list(items)))
    assert first == again == [Say("Reading the README."), Call("read_file", '{"path": "README.md"}')]


def test_act_returns_a_fresh_list() -> None:
    policy = ScriptedPolicy.from_steps(SCENARIO)
    policy.act(TurnContext(items=[user("go")])).append(Say("mutated"))
    assert policy.act(TurnContext(items=[user("go")])) == [Call("ls", '{"path": "."}')]


# ---------------------------------------------------------------- reading a large ask quickly

ASK_PIECES = [
    "Write 4000 tokens.",
    "write 1,000 output tokens",
    "3_000 TOKENS",
    "12 token",
    "7tokens",
    "9 tokensx",
    "a1 tokens",
    ",5 tokens",
    "8   \n  output\t tokens",
    "٣ tokens",  # an Arabic-Indic digit: \d, and not ASCII
    "long",
    "LONG",
    "belong",
    "longer",
    "an essay",
    "essays",
    "at length",
    "AT  length",
    "as long as",
    "loNg",
    "ſ",  # long s: non-ASCII, so the original patterns decide
    "K",
    " ",
    "\n",
    "x",
    "1",
    "_",
    ",",
]
asks = st.lists(st.sampled_from(ASK_PIECES) | st.text(max_size=6), max_size=8).map("".join)


@settings(max_examples=1500, deadline=None)
@given(asks)
def test_the_fast_readers_match_exactly_where_the_patterns_match(ask: str) -> None:
    found = TOKEN_TARGET.search(ask)
    assert token_target(ask) == (found.group(1) if found else None)
    assert asks_for_long(ask) == (LONG_WORDS.search(ask) is not None)
