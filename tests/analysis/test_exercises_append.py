"""Exercise 2 (notebook 02): the learner's rendered-token append, checked against a full re-render.

The conversation is a real rollout: the scenario played over the official SDK against a real
server, its tools run for real. The learner's functions here are the notebook's own skeleton and
solution (read from the notebook) and the usual wrong ones, each with the sentence it gets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from labkit.analysis.exercises import append as exercise
from labkit.analysis.exercises import check_append, reference_append, rollout_conversation
from labkit.client.launcher import LabkitServer
from labkit.engine.render import TokenBuffer, encode_rendered, item_block, render_conversation
from labkit.paths import default_data_dir
from labkit.scenarios import load_scenario
from labkit.text.tokenizer import IM_END, IM_SEP, IM_START, decode_text, encode_text, encoding, special

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_single_request_optimizations.ipynb"
Append = Callable[[list[int], list[dict[str, Any]]], list[int]]


def notebook_source(cell_id: str) -> str:
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    return next(cell.source for cell in cells if cell.get("id") == cell_id)


def defined(source: str) -> Append:
    """``append_items`` as the notebook's cell (or solution block) defines it."""
    namespace: dict[str, Any] = {}
    exec(notebook_source("x2-skeleton").split("\n\n\ndef ")[0], namespace)  # the cell's imports
    exec(source, namespace)
    return namespace["append_items"]


def solution() -> Append:
    block = re.search(r"```python\n(.*?)```", notebook_source("x2-solution"), re.DOTALL)
    assert block is not None, "the solution cell holds a python block"
    return defined(block.group(1))


@pytest.fixture(scope="module")
def conversation() -> Iterator[exercise.Conversation]:
    with LabkitServer() as server:
        yield rollout_conversation(server.base_url, load_scenario("fix-failing-test", default_data_dir()))


def verdict(
    mine: Append, conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str], **kw: Any
) -> str:
    check = check_append(mine, conversation, **kw)
    printed = capsys.readouterr().out.strip()
    assert check.verdict is not None and printed.startswith(check.verdict.sentence)
    return printed


# ---------------------------------------------------------------- the conversation and the oracle


def test_the_conversation_is_a_real_rollout_with_calls_outputs_and_a_final_answer(
    conversation: exercise.Conversation,
) -> None:
    kinds = [item["type"] for item in conversation.items]
    assert conversation.batches[0] == [
        {"type": "message", "role": "user", "content": conversation.batches[0][0]["content"]}
    ]
    assert kinds.count("function_call") == kinds.count("function_call_output") > 10
    calls = {i["call_id"] for i in conversation.items if i["type"] == "function_call"}
    assert calls == {i["call_id"] for i in conversation.items if i["type"] == "function_call_output"}
    assert conversation.batches[-1][-1]["type"] == "message"  # the final answer
    assert any("FAILED" in str(i.get("output")) for i in conversation.items)  # the tests really ran


def test_labkits_reference_equals_a_full_re_render_on_every_turn(conversation: exercise.Conversation) -> None:
    cached = encode_rendered(render_conversation(conversation.instructions, conversation.tools, []))
    so_far: list[dict[str, Any]] = []
    for batch in conversation.batches:
        so_far += batch
        cached = reference_append(cached, batch)
        assert cached == encode_rendered(
            render_conversation(conversation.instructions, conversation.tools, so_far)
        )


def test_markup_in_text_stays_text_in_the_oracle() -> None:
    ids = exercise.full_render(
        None, [], [{"type": "function_call_output", "call_id": "c", "output": exercise.MARKUP_TEXT}]
    )
    assert ids.count(special(IM_END)) == 2  # the system block's and the output's own: none from its text
    assert exercise.MARKUP_TEXT in decode_text(ids)


# ---------------------------------------------------------------- the notebook's skeleton and solution


def test_the_notebooks_solution_is_right_on_every_rule(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = solution()
    check = check_append(mine, conversation)
    said = capsys.readouterr().out.strip()
    assert check.verdict is not None and check.verdict.right and check.used is mine
    appends = len(conversation.batches)
    assert said.startswith(
        "Checked your append_items: right on every rule "
        f"(the same ids as a full re-render on all {appends} appends"
    )
    assert check.last_turn["encoded"] < check.last_turn["added"] < check.last_turn["full"]


def test_the_skeleton_hands_on_labkits_reference_in_one_line(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    skeleton = defined(notebook_source("x2-skeleton"))
    check = check_append(skeleton, conversation)
    said = capsys.readouterr().out.strip()
    assert said.startswith("Your append_items is still the skeleton: this run uses labkit's reference")
    assert "\n" not in said and check.verdict is None and check.used is reference_append
    assert check.work_sentence().startswith(
        "On the rollout's last turn labkit's reference (yours is still the skeleton) added"
    )


def test_the_skeletons_worked_example_is_what_the_solution_returns() -> None:
    example = notebook_source("x2-skeleton")
    item = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    assert repr(solution()([1, 2], [item])) in example
    assert repr(item_block(item)) in example


# ---------------------------------------------------------------- wrong solutions, one sentence each


def header_and_body_as_one_text(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    ids = list(cached)
    for item in new_items:
        header, body = item_block(item)
        ids += [special(IM_START), *encode_text(header + body), special(IM_END)]
    return ids


def all_new_text_at_once(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    text = "".join(f"{IM_START}{header}{IM_SEP}{body}{IM_END}" for header, body in map(item_block, new_items))
    return [*cached, *encode_text(text)]


def markers_recognised_in_text(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    text = "".join(f"{IM_START}{header}{IM_SEP}{body}{IM_END}" for header, body in map(item_block, new_items))
    return [*cached, *encoding().encode(text, allowed_special="all")]


def special_tokens_dropped(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    ids = list(cached)
    for item in new_items:
        header, body = item_block(item)
        ids += [*encode_text(header), *encode_text(body)]
    return ids


def parts_tokenized_one_by_one(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    ids = list(cached)
    for item in new_items:
        header, body = item_block(item)
        content = item.get("content")
        body_ids = (
            [t for p in content for t in encode_text(p["text"])]
            if isinstance(content, list)
            else encode_text(body)
        )
        ids += [special(IM_START), *encode_text(header), special(IM_SEP), *body_ids, special(IM_END)]
    return ids


def re_renders_everything(conversation: exercise.Conversation) -> Append:
    """Right ids, wrong work: keeps every conversation's items and tokenizes all of them again."""
    start = encode_rendered(render_conversation(conversation.instructions, conversation.tools, []))
    items_of: dict[tuple[int, ...], list[dict[str, Any]]] = {tuple(start): []}

    def append_items(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
        items = items_of[tuple(cached)] + new_items
        buffer = TokenBuffer.start(conversation.instructions, conversation.tools)
        buffer.append(items)
        items_of[tuple(buffer.ids)] = items
        return list(buffer.ids)

    return append_items


def raises(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    return [*cached, *(special(text) for item in new_items for text in item_block(item))]


def returns_text(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    return decode_text(reference_append(cached, new_items))  # type: ignore[return-value]


def hangs(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
    while True:
        pass


@pytest.mark.parametrize(
    ("mine", "sentence"),
    [
        (
            header_and_body_as_one_text,
            "at turn 0 your ids differ from a full re-render from the message (user) "
            "onward: each item needs its three special tokens",
        ),
        (
            all_new_text_at_once,
            "at turn 0 your ids differ from a full re-render from the message (user) "
            "onward: the markers in your text stayed text",
        ),
        (
            special_tokens_dropped,
            "at turn 0 your ids differ from a full re-render from the message (user) "
            "onward: each item needs its three special tokens",
        ),
        (
            markers_recognised_in_text,
            "in the edge case 'text that looks like the template's markup' your ids "
            "differ from a full re-render from the function_call_output onward: text that only looks like "
            "markup became special tokens",
        ),
        (
            parts_tokenized_one_by_one,
            "in the edge case 'a message whose content is a list of parts' your ids "
            "differ from a full re-render from the message (user) onward: tokenize each item's header and "
            "body on their own",
        ),
        (raises, "at turn 0 your append_items raised KeyError: 'user'"),
        (returns_text, "at turn 0 your append_items returned a str, not a list of token ids (ints)"),
    ],
)
def test_a_wrong_append_gets_one_sentence_naming_where_and_why(
    mine: Append, sentence: str, conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    check = check_append(mine, conversation)
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"Checked your append_items: {sentence}"), said
    assert "\n" not in said  # one sentence
    # the notebook goes on, with labkit's reference in its place
    assert check.used is reference_append
    assert "labkit's reference (yours is not right yet) added" in check.work_sentence()


def test_merging_neighbours_is_named_when_the_special_tokens_are_all_there(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    def header_and_body_merged(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
        ids = list(cached)
        for item in new_items:
            header, body = item_block(item)
            merged = encode_text(header + body)  # the separator comes after both, as if it were free
            ids += [special(IM_START), *merged, special(IM_SEP), special(IM_END)]
        return ids

    said = verdict(header_and_body_merged, conversation, capsys)
    assert (
        "at turn 0 your ids differ from a full re-render from the message (user) onward: "
        "tokenize each item's header and body on their own" in said
    )


def test_re_rendering_everything_has_the_right_ids_and_is_told_it_is_not_an_append(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = re_renders_everything(conversation)
    check = check_append(mine, conversation)
    said = capsys.readouterr().out.strip()
    assert said.startswith("Checked your append_items: right ids, but "), said
    assert check.used is mine and check.last_turn["encoded"] > check.last_turn["cached"] // 2
    assert "you re-tokenized the whole conversation, the work the cache exists to save" in said
    assert "edge case" not in said  # a turn of the rollout is named, where the learner can see it


def test_a_hanging_append_is_stopped_and_named(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    said = verdict(hangs, conversation, capsys, limit_s=0.3)
    assert said == (
        "Checked your append_items: at turn 0 your append_items had not returned after 0.3 s: an append "
        "does a little work per new item, so look for a loop that never ends."
    )


def test_the_check_leaves_the_tokenizer_as_it_found_it(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    check_append(raises, conversation)
    assert not set(vars(encoding())) & {"encode", "encode_ordinary", "encode_batch", "encode_ordinary_batch"}


def test_numbers_that_are_no_token_ids_are_wrong_ids_not_a_crash(
    conversation: exercise.Conversation, capsys: pytest.CaptureFixture[str]
) -> None:
    def made_up(cached: list[int], new_items: list[dict[str, Any]]) -> list[int]:
        return [*reference_append(cached, new_items)[:-1], 10**9, 100261]

    said = verdict(made_up, conversation, capsys)
    assert said.startswith("Checked your append_items: at turn 0 your ids differ from a full re-render"), said
