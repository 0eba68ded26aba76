"""The chat template: appending items to a TokenBuffer equals re-tokenizing the whole rendering.

The oracle is ``encode_rendered(render_conversation(...))``: the full conversation
as one string, tokenized at once with markup recognised as special tokens.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from labkit.engine.render import (
    GENERATION_PROMPT,
    TokenBuffer,
    TokenView,
    encode_block,
    encode_rendered,
    item_block,
    render_conversation,
    system_block,
    system_digest,
)
from labkit.text.tokenizer import IM_START, SPECIAL_TOKENS, encode_text

pytestmark = pytest.mark.slow  # property searches

Item = dict[str, Any]

# ---------------------------------------------------------------- strategies

WORDS = [
    "hello",
    " world",
    "'s",
    " 123",
    "4567",
    "é",
    " 日本語",
    "🙂",
    "{",
    '"}',
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
]
texts = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.characters() | st.sampled_from(" \t\r\n"), max_size=40),
    st.lists(st.sampled_from(WORDS), max_size=12).map("".join),  # whitespace runs at the edges
)
short = st.text(max_size=12)
json_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | short
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short, inner, max_size=3),
    max_leaves=6,
)

leaf_schemas = st.one_of(
    st.builds(dict, type=st.just("string")),
    st.fixed_dictionaries({"type": st.just("string")}, optional={"minLength": st.integers(0, 5)}),
    st.fixed_dictionaries({"type": st.just("integer")}, optional={"minimum": st.integers(-5, 5)}),
    st.builds(dict, type=st.just("number")),
    st.builds(dict, type=st.just("boolean")),
    st.builds(dict, type=st.just(["string", "null"])),
    st.builds(dict, enum=st.lists(short | st.integers(), max_size=3)),
    st.builds(dict, description=texts),
    st.just({}),
)


def _composite_schemas(inner: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    objects = st.dictionaries(short, inner, max_size=4).flatmap(
        lambda props: st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.just(props)},
            optional={"required": st.lists(st.sampled_from(sorted(props) or [""]), unique=True)},
        )
    )
    arrays = st.fixed_dictionaries({"type": st.just("array"), "items": inner})
    return objects | arrays


schemas = st.recursive(leaf_schemas, _composite_schemas, max_leaves=8)

function_tools = st.fixed_dictionaries(
    {"type": st.just("function"), "name": short, "parameters": schemas},
    optional={"description": texts, "strict": st.booleans()},
)
other_tools = st.fixed_dictionaries(
    {"type": st.sampled_from(["web_search", "namespace", "local_shell"])},
    optional={"name": short, "extra": json_values},
)
tool_lists = st.lists(function_tools | other_tools, max_size=4)

parts = st.one_of(
    st.builds(dict, type=st.just("input_text"), text=texts),
    st.builds(dict, type=st.just("output_text"), text=texts, annotations=st.just([])),
    st.builds(dict, type=st.just("input_image"), image_url=short),  # no text: rendered as JSON
)
contents = texts | st.lists(parts, max_size=3)

messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer"]), "content": contents},
    optional={"type": st.just("message"), "id": short, "status": st.just("completed")},
)
function_calls = st.fixed_dictionaries(
    {"type": st.just("function_call"), "call_id": short, "name": short, "arguments": texts},
    optional={"id": short, "status": st.just("completed")},  # Codex replays omit id and status
)
function_call_outputs = st.fixed_dictionaries(
    {"type": st.just("function_call_output"), "call_id": short, "output": contents},
)
reasonings = st.fixed_dictionaries(
    {"type": st.just("reasoning")},
    optional={
        "id": short,
        "summary": st.lists(st.builds(dict, type=st.just("summary_text"), text=texts), max_size=2),
        "encrypted_content": short,
    },
)
unknown_items = st.fixed_dictionaries(
    {"type": st.sampled_from(["local_shell_call", "web_search_call", "custom_tool_call"])},
    optional={"id": short, "status": short, "action": json_values, "call_id": short},
)
items = st.one_of(messages, function_calls, function_call_outputs, reasonings, unknown_items)
instructions = st.none() | texts


def no_markup(*strings: str) -> bool:
    return not any(token in s for token in SPECIAL_TOKENS for s in strings)


def assume_plain(instr: str | None, tools: list[Item], conversation: list[Item]) -> None:
    """Markup strings inside text are ordinary text for the buffer but markup for the oracle."""
    blocks = [system_block(instr, tools), *(item_block(i) for i in conversation)]
    assume(all(no_markup(header, body) for header, body in blocks))


ORACLE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------- the oracle


@ORACLE
@given(instructions, tool_lists, st.lists(items, max_size=8), st.data())
def test_appending_in_batches_equals_full_retokenization(
    instr: str | None, tools: list[Item], conversation: list[Item], data: st.DataObject
) -> None:
    assume_plain(instr, tools, conversation)
    buf = TokenBuffer.start(instr, tools)
    rest = list(conversation)
    while rest:
        size = data.draw(st.integers(1, len(rest)), label="batch size")
        batch, rest = rest[:size], rest[size:]
        buf.append(batch)
    assert buf.ids == encode_rendered(render_conversation(instr, tools, conversation))
    assert buf.items == len(conversation)


@ORACLE
@given(instructions, tool_lists, st.lists(items, max_size=8))
def test_appending_one_by_one_equals_full_retokenization_at_every_step(
    instr: str | None, tools: list[Item], conversation: list[Item]
) -> None:
    assume_plain(instr, tools, conversation)
    buf = TokenBuffer.start(instr, tools)
    assert buf.ids == encode_rendered(render_conversation(instr, tools, []))
    for n, item in enumerate(conversation, start=1):
        buf.append([item])
        assert buf.ids == encode_rendered(render_conversation(instr, tools, conversation[:n]))


def test_prompt_ends_with_the_assistant_turn_opener() -> None:
    buf = TokenBuffer.start("Be brief.", [])
    buf.append([{"type": "message", "role": "user", "content": "hi"}])
    assert encode_rendered(f"{IM_START}assistant") == GENERATION_PROMPT
    assert buf.prompt() == buf.ids + GENERATION_PROMPT
    assert buf.prompt()[: len(buf.ids)] == buf.ids


# ---------------------------------------------------------------- sampled output

sampled_items = st.one_of(
    st.builds(
        lambda text: {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        },
        texts,
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": short, "name": short, "arguments": texts}
    ),
)


@settings(max_examples=100, deadline=None)
@given(instructions, st.lists(items, max_size=3), sampled_items)
def test_append_sampled_equals_append(instr: str | None, history: list[Item], item: Item) -> None:
    assume_plain(instr, [], [*history, item])
    header, body = item_block(item)
    rendered, sampled = TokenBuffer.start(instr, []), TokenBuffer.start(instr, [])
    rendered.append(history)
    sampled.append(history)
    before = sampled.encoded
    added = sampled.append_sampled(item, encode_text(body))
    rendered.append([item])
    assert sampled.ids == rendered.ids
    assert sampled.items == rendered.items
    # the renderer produced the markup and the header; the sampled body was already ids
    assert added == len(encode_text(header)) + 3
    assert sampled.encoded - before == added


# ---------------------------------------------------------------- fork and the work counter

USER = {"type": "message", "role": "user", "content": "List the files, please."}
CALL = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": '{"path": "."}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nlabkit/"}


def test_fork_shares_with_zero_work_and_does_not_alias() -> None:
    # A fork is a view of the same ids (no copy), which must still behave as a copy:
    # appending to either leaves the other as it was.
    buf = TokenBuffer.start("Be brief.", [])
    buf.append([USER, CALL])
    ids_before, encoded_before = list(buf.ids), buf.encoded
    fork = buf.fork()
    assert fork.system_digest == buf.system_digest
    assert fork.ids == buf.ids
    assert fork.items == buf.items == 2
    assert fork.encoded == 0
    added = fork.append([OUTPUT])
    assert fork.encoded == added == len(fork.ids) - len(ids_before)
    assert fork.copied == 0  # the first view to grow extends the shared ids in place
    assert buf.ids == ids_before  # the original is untouched
    assert buf.items == 2
    assert buf.encoded == encoded_before
    grown = list(fork.ids)
    buf.append([USER])  # the original grows too: it copies its own ids first (copy-on-write)
    assert buf.copied == len(ids_before)
    assert fork.ids == grown
    assert buf.ids == ids_before + encode_block(*item_block(USER))


def test_views_of_one_buffer_keep_their_block_hashes_apart() -> None:
    buf = TokenBuffer.start("Be brief.", [])
    buf.add_block_hashes([1, 2])
    a, b = buf.fork(), buf.fork()
    a.add_block_hashes([3])
    b.add_block_hashes([4, 5])  # past a's hashes: b copies its two first
    views = (buf.block_hashes, a.block_hashes, b.block_hashes)
    assert [list(view) for view in views] == [[1, 2], [1, 2, 3], [1, 2, 4, 5]]
    assert (a.copied, b.copied) == (0, 2)


def test_a_token_view_reads_like_the_list_it_shows() -> None:
    grows = [5, 6, 7]
    view = TokenView(grows, 2)
    grows += [8, 9]
    shown = [5, 6]
    assert len(view) == 2 and list(view) == shown and view == shown and shown == view  # both ways
    assert view[0] == 5 and view[-1] == 6 and view[1:] == [6] and view[-5:] == shown
    assert view + shown == [5, 6, 5, 6] and view != [5, 6, 7]
    with pytest.raises(IndexError):
        view[2]


def test_fork_then_append_equals_a_fresh_render() -> None:
    buf = TokenBuffer.start("Be brief.", [])
    buf.append([USER, CALL])
    fork = buf.fork()
    fork.append([OUTPUT])
    fresh = TokenBuffer.start("Be brief.", [])
    fresh.append([USER, CALL, OUTPUT])
    assert fork.ids == fresh.ids
    assert fresh.encoded == len(fresh.ids)
    assert fork.encoded < fresh.encoded


@settings(max_examples=60, deadline=None)
@given(instructions, tool_lists, st.lists(items, max_size=6))
def test_encoded_counts_exactly_the_tokens_added(
    instr: str | None, tools: list[Item], conversation: list[Item]
) -> None:
    buf = TokenBuffer.start(instr, tools)
    assert buf.encoded == len(buf.ids)
    for item in conversation:
        before_ids, before_encoded = len(buf.ids), buf.encoded
        added = buf.append([item])
        assert added == len(buf.ids) - before_ids
        assert buf.encoded - before_encoded == added
    assert buf.append([]) == 0
    assert buf.encoded == len(buf.ids)


# ---------------------------------------------------------------- the system digest

LS = {
    "type": "function",
    "name": "ls",
    "description": "List files.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


def test_system_digest_is_stable_for_equal_inputs() -> None:
    assert system_digest("Be brief.", [LS]) == system_digest("Be brief.", [json.loads(json.dumps(LS))])
    assert system_digest(None, []) == system_digest("", [])
    assert system_block(None, []) == system_block("", [])
    assert TokenBuffer.start("Be brief.", [LS]).system_digest == system_digest("Be brief.", [LS])


@pytest.mark.parametrize(
    ("instructions", "tools"),
    [
        ("Be verbose.", [LS]),
        (None, [LS]),
        ("Be brief.", []),
        ("Be brief.", [{**LS, "description": "List the files."}]),
        ("Be brief.", [{**LS, "name": "list"}]),
        ("Be brief.", [{**LS, "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}}}]),
        ("Be brief.", [LS, {"type": "web_search"}]),
        ("Be brief.", [{"type": "web_search"}, LS]),
    ],
)
def test_system_digest_changes_with_instructions_or_tools(
    instructions: str | None, tools: list[Item]
) -> None:
    assert system_digest(instructions, tools) != system_digest("Be brief.", [LS])
    assert system_block(instructions, tools) != system_block("Be brief.", [LS])


def test_equal_system_digests_mean_equal_system_blocks() -> None:
    # property order is rendered ("{a?: string, b?: number}"), so it must be part of the digest
    props_ab = {"a": {"type": "string"}, "b": {"type": "integer"}}
    props_ba = {"b": {"type": "integer"}, "a": {"type": "string"}}
    tool_ab = {**LS, "parameters": {"type": "object", "properties": props_ab}}
    tool_ba = {**LS, "parameters": {"type": "object", "properties": props_ba}}
    assert system_block("x", [tool_ab]) != system_block("x", [tool_ba])
    assert system_digest("x", [tool_ab]) != system_digest("x", [tool_ba])


@settings(max_examples=100, deadline=None)
@given(instructions, tool_lists, instructions, tool_lists)
def test_equal_digests_imply_equal_system_blocks(
    instr_a: str | None, tools_a: list[Item], instr_b: str | None, tools_b: list[Item]
) -> None:
    for instr, tools in ((instr_a, tools_a), (instr_b, tools_b)):
        assert system_digest(instr, tools) == system_digest(instr, json.loads(json.dumps(tools)))
    if system_digest(instr_a, tools_a) == system_digest(instr_b, tools_b):
        assert system_block(instr_a, tools_a) == system_block(instr_b, tools_b)
