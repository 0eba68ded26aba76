"""WebSocket mode through the official ``openai`` SDK, unmodified: ``client.responses.connect()``.

What is checked here is behaviour a client sees (turns complete, usage, errors that
leave the socket open) and the mechanism behind it, read from the server's own spans
(``GET /v1/labkit/traces``): a follow-up on the socket that produced the previous
response is served from the connection cache and renders only its new items, while the
same conversation over HTTP hydrates from the store and re-renders everything.

Nothing here measures wall-clock time; every assertion is on events, token counts and
where the server says the history came from.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from openai import NotFoundError, OpenAI
from openai.resources.responses.responses import ResponsesConnection

from labkit.client.launcher import LabkitServer
from labkit.engine.prefix_cache import PrefixCache
from labkit.engine.render import GENERATION_PROMPT, encode_block, item_block
from tests.helpers import READ_FILE_TOOL, by_stage, server_spans

MODEL = "labkit-spark"
BLOCK = PrefixCache().block_size  # the replica's prefix-cache block (16 tokens)
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
# Long enough to make the first turn's prompt many prefix-cache blocks, with no digits
# followed by "tokens" and no "long"/"essay" so the generic policy answers briefly.
LONG_HISTORY = "The build broke in the date parser after the refactor of the calendar module. " * 200
NEXT = "Next step, please."


# ---------------------------------------------------------------- helpers


def fresh_instructions() -> str:
    """Instructions no other test uses, so nothing of this prompt is in the prefix cache yet.

    Well over 16 tokens (one prefix-cache block), so a retained prompt leaves full blocks.
    """
    return (
        f"Session {uuid.uuid4().hex}. You are a careful coding agent working in a Python "
        "repository. Read files before changing them, and answer briefly when you are done."
    )


@contextmanager
def ws(client: OpenAI) -> Iterator[ResponsesConnection]:
    with client.responses.connect() as conn:
        yield conn


def turn(conn: ResponsesConnection, **create: Any) -> tuple[list[Any], Any]:
    """Send one ``response.create`` and read events up to its terminal event or error."""
    conn.response.create(**create)
    events: list[Any] = []
    for event in conn:
        events.append(event)
        if event.type in TERMINAL or event.type == "error":
            return events, event
    raise AssertionError(f"the connection closed before a terminal event; got {[e.type for e in events]}")


def completed(conn: ResponsesConnection, **create: Any) -> Any:
    """One turn that must complete; returns the final Response."""
    events, last = turn(conn, **create)
    assert last.type == "response.completed", last
    assert events[0].type == "response.created"
    return last.response


def spans(server: LabkitServer, response_id: str) -> dict[str, dict[str, Any]]:
    """The server's spans for a response, by stage."""
    return by_stage(server_spans(server.base_url, response_id))


def block_tokens(item: dict[str, Any]) -> int:
    """Tokens one item renders to: ``<|im_start|>header<|im_sep|>body<|im_end|>``.

    The server normalises an input item (pydantic dump, an ``id`` added when missing);
    ``item_block`` ignores ``id`` and ``status`` for messages, calls and call outputs,
    so the item as sent renders exactly like the item as the server keeps it.
    """
    return len(encode_block(*item_block(item)))


def output_dict(item: Any) -> dict[str, Any]:
    return item.to_dict() if hasattr(item, "to_dict") else dict(item)


def tool_outputs(response: Any) -> list[dict[str, Any]]:
    """The client's side of a tool turn: one ``function_call_output`` per call."""
    outputs = []
    for item in response.output:
        if item.type == "function_call":
            path = json.loads(item.arguments)["path"]
            outputs.append(
                {
                    "type": "function_call_output",
                    "call_id": item.call_id,
                    "output": f"# {path}\nprint('hello from {path}')\n",
                }
            )
    return outputs


def cached(response: Any) -> int:
    return response.usage.input_tokens_details.cached_tokens


def run_tool_loop(conn: ResponsesConnection, **common: Any) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Run the generic policy's tool loop; each follow-up sends only the new tool outputs.

    Returns ``(response, new_items_sent_for_it)`` per turn.
    """
    first_input = [{"type": "message", "role": "user", "content": "Read the README and summarise it."}]
    response = completed(conn, input=first_input, **common)
    turns = [(response, first_input)]
    while (outputs := tool_outputs(response)) and len(turns) < 10:
        response = completed(conn, input=outputs, previous_response_id=response.id, **common)
        turns.append((response, outputs))
    return turns


# ---------------------------------------------------------------- 1. the tool loop


def test_sdk_tool_loop_on_one_socket_sends_only_new_items(client: OpenAI) -> None:
    common = {"model": MODEL, "instructions": fresh_instructions(), "tools": [READ_FILE_TOOL], "store": False}
    with ws(client) as conn:
        turns = run_tool_loop(conn, **common)

    responses = [r for r, _ in turns]
    assert len(responses) >= 4, "expected at least three tool turns and a final answer"
    for previous, current in itertools.pairwise(responses):
        assert current.previous_response_id == previous.id
    for response in responses:
        assert response.status == "completed"
        assert response.store is False
        assert response.usage.input_tokens > cached(response)
    for response in responses[:-1]:
        assert [item.type for item in response.output] == ["function_call"]
        assert response.output[0].name == "read_file"
        arguments = json.loads(response.output[0].arguments)
        assert set(arguments) == {"path"} and isinstance(arguments["path"], str), "schema-valid arguments"

    # Each turn's prompt extends the previous one, so the prefix cache serves more of it.
    hits = [cached(r) for r in responses]
    assert hits[0] == 0, "fresh instructions: nothing was cached before the first turn"
    assert all(a < b for a, b in itertools.pairwise(hits)), hits

    final = responses[-1]
    assert [item.type for item in final.output] == ["message"]
    assert final.output[0].role == "assistant"
    assert final.output[0].content[0].type == "output_text"
    assert final.output_text.strip()


# ---------------------------------------------------------------- 2. render only what is new


def test_ws_follow_up_renders_only_the_new_items(client: OpenAI, server: LabkitServer) -> None:
    """On a cache hit the render span encodes exactly the new items' blocks.

    Two exact formulations are checked for every follow-up ``k``:

    - ``render.tokens == sum(block_tokens(item) for item in new_items_k)``: the tokenizer
      ran on the new items only;
    - ``render.tokens == prompt_k - prompt_{k-1} - sum(block_tokens(o) for o in output_{k-1})``,
      where ``prompt`` is the render span's ``detail.prompt_tokens``: the prompt did grow
      by the whole previous output, but the sampled output was appended from its ids
      (only its header encoded, in the previous turn's ``retain`` span), so what this
      turn rendered is the rest of the growth, the new items.
    """
    common = {"model": MODEL, "instructions": fresh_instructions(), "tools": [READ_FILE_TOOL], "store": False}
    with ws(client) as conn:
        turns = run_tool_loop(conn, **common)
    assert len(turns) >= 4

    traces = [spans(server, r.id) for r, _ in turns]
    first = traces[0]
    assert first["hydration"]["detail"]["source"] == "none"
    assert first["render"]["tokens"] == first["render"]["detail"]["prompt_tokens"]

    history_items = 0
    for k, ((response, new_items), trace) in enumerate(zip(turns, traces, strict=True)):
        render, hydrate = trace["render"], trace["hydration"]
        prompt = render["detail"]["prompt_tokens"]
        assert prompt + len(GENERATION_PROMPT) == response.usage.input_tokens
        assert render["items"] == len(new_items)
        assert hydrate["items"] == history_items
        history_items += len(new_items) + len(response.output)
        if k == 0:
            continue
        previous_response = turns[k - 1][0]
        assert hydrate["detail"]["source"] == "connection_cache"
        assert trace["routing"]["detail"].get("reused") is True
        new_tokens = sum(block_tokens(item) for item in new_items)
        assert render["tokens"] == new_tokens
        previous_prompt = traces[k - 1]["render"]["detail"]["prompt_tokens"]
        previous_output = sum(block_tokens(output_dict(o)) for o in previous_response.output)
        assert render["tokens"] == prompt - previous_prompt - previous_output
        assert render["tokens"] < prompt - previous_prompt


def ws_follow_up(client: OpenAI, server: LabkitServer, instructions: str, first: str) -> dict[str, Any]:
    with ws(client) as conn:
        common = {"model": MODEL, "instructions": instructions, "store": False}
        head = completed(conn, input=first, **common)
        nxt = completed(
            conn, input=[{"role": "user", "content": NEXT}], previous_response_id=head.id, **common
        )
    return spans(server, nxt.id)


def http_follow_up(client: OpenAI, server: LabkitServer, instructions: str, first: str) -> dict[str, Any]:
    # The naive design: no render cache, so the stored history is rendered again in full.
    common = {"model": MODEL, "instructions": instructions, "store": True}
    naive = {"x-labkit-design": "naive"}
    head = client.responses.create(input=first, extra_headers=naive, **common)
    nxt = client.responses.create(
        input=[{"role": "user", "content": NEXT}], previous_response_id=head.id, extra_headers=naive, **common
    )
    assert head.status == nxt.status == "completed"
    return spans(server, nxt.id)


def test_ws_render_cost_does_not_grow_with_history_but_http_does(
    client: OpenAI, server: LabkitServer
) -> None:
    """The same two-turn conversations, with a short and a long first turn, on WS and on HTTP.

    The conversations are identical text on both transports (the policy is deterministic
    and no call ids are involved), so their prompts are token-for-token equal; only the
    render work differs.
    """
    instructions = fresh_instructions()
    new_item_tokens = block_tokens({"type": "message", "role": "user", "content": NEXT})

    ws_short = ws_follow_up(client, server, instructions, "Hi there.")
    ws_long = ws_follow_up(client, server, instructions, LONG_HISTORY)
    http_short = http_follow_up(client, server, instructions, "Hi there.")
    http_long = http_follow_up(client, server, instructions, LONG_HISTORY)

    short_prompt = ws_short["render"]["detail"]["prompt_tokens"]
    long_prompt = ws_long["render"]["detail"]["prompt_tokens"]
    assert long_prompt > short_prompt + 1000, "the long history should be much longer"

    # WS: served from the connection cache, renders the new message only, whatever came before.
    for trace in (ws_short, ws_long):
        assert trace["hydration"]["detail"]["source"] == "connection_cache"
        assert trace["render"]["items"] == 1
        assert trace["render"]["tokens"] == new_item_tokens
    assert ws_short["render"]["tokens"] == ws_long["render"]["tokens"]

    # HTTP: hydrated from the store and the whole prompt re-rendered, so it grows with history.
    assert http_short["render"]["detail"]["prompt_tokens"] == short_prompt
    assert http_long["render"]["detail"]["prompt_tokens"] == long_prompt
    for trace in (http_short, http_long):
        assert trace["hydration"]["detail"]["source"] == "store"
        assert trace["hydration"]["items"] == 2
        assert trace["render"]["tokens"] == trace["render"]["detail"]["prompt_tokens"]
    assert http_long["render"]["tokens"] - http_short["render"]["tokens"] == long_prompt - short_prompt


def test_changed_instructions_on_a_cache_hit_rerender_the_prompt(
    client: OpenAI, server: LabkitServer
) -> None:
    """Instructions are not carried over: new ones mean a new system block, so a full render."""
    with ws(client) as conn:
        head = completed(conn, model=MODEL, instructions=fresh_instructions(), input="Hi.", store=False)
        nxt = completed(
            conn,
            model=MODEL,
            instructions=fresh_instructions(),
            input=NEXT,
            previous_response_id=head.id,
            store=False,
        )
    trace = spans(server, nxt.id)
    assert trace["hydration"]["detail"]["source"] == "connection_cache"
    assert trace["render"]["tokens"] == trace["render"]["detail"]["prompt_tokens"]
    assert nxt.instructions != head.instructions


# ---------------------------------------------------------------- 3. unknown previous response


def test_unknown_previous_response_is_a_nested_error_and_the_socket_survives(client: OpenAI) -> None:
    with ws(client) as conn:
        events, err = turn(
            conn, model=MODEL, input="Hello?", store=False, previous_response_id="resp_does_not_exist"
        )
        assert [e.type for e in events] == ["error"], "an error answers the request; no response starts"
        raw = err.to_dict()
        message = raw["error"].pop("message")
        assert raw == {
            "type": "error",
            "status": 400,
            "error": {
                "type": "invalid_request_error",
                "code": "previous_response_not_found",
                "param": "previous_response_id",
            },
        }
        assert "resp_does_not_exist" in message

        head = completed(conn, model=MODEL, input="Hello again.", store=False)
        nxt = completed(conn, model=MODEL, input=NEXT, previous_response_id=head.id, store=False)
        assert nxt.previous_response_id == head.id


# ---------------------------------------------------------------- 4. warm-up


def test_generate_false_warm_up_then_chained_turn_hits_the_prefix_cache(
    client: OpenAI, server: LabkitServer
) -> None:
    """Codex's pattern: a ``generate: false`` warm-up, then the real turn chained on it, store=False."""
    common = {"model": MODEL, "instructions": fresh_instructions(), "tools": [READ_FILE_TOOL], "store": False}
    developer = {"role": "developer", "content": "The repository is a small Python package."}
    with ws(client) as conn:
        events, last = turn(conn, input=[developer], generate=False, **common)
        assert [e.type for e in events] == ["response.created", "response.in_progress", "response.completed"]
        warm = last.response
        assert warm.id.startswith("resp_")
        assert warm.status == "completed"
        assert warm.output == []
        assert warm.usage.output_tokens == 0
        assert cached(warm) == 0, "fresh instructions: the warm-up itself found nothing cached"

        question = {"role": "user", "content": "Read the README."}
        real = completed(conn, input=[question], previous_response_id=warm.id, **common)

    assert real.previous_response_id == warm.id
    assert [item.type for item in real.output] == ["function_call"]

    warm_trace = spans(server, warm.id)
    assert "decode" not in warm_trace, "a warm-up samples nothing"
    warm_prompt = warm_trace["render"]["detail"]["prompt_tokens"]
    assert warm_prompt > BLOCK, "the warm-up prompt must span at least one prefix-cache block"
    assert warm_trace["prefill"]["tokens"] == warm.usage.input_tokens

    # The warm-up prefilled (and retained) its prompt, so the real turn's prefix is cached.
    # At most the warm-up's whole prefill prompt can be: its rendered prompt plus the
    # assistant opener, whose first token (<|im_start|>) the real turn shares.
    assert 0 < cached(real) <= warm.usage.input_tokens
    assert cached(real) >= warm_prompt - warm_prompt % BLOCK, "every full block of the warm-up is reused"
    real_trace = spans(server, real.id)
    assert real_trace["prefill"]["detail"]["cached_tokens"] == cached(real)
    assert real_trace["hydration"]["detail"]["source"] == "connection_cache"
    assert real_trace["render"]["tokens"] == block_tokens({"type": "message", **question})


# ---------------------------------------------------------------- 7. store=true across sockets


def test_stored_response_chains_from_a_new_socket_and_is_retrievable(
    client: OpenAI, server: LabkitServer
) -> None:
    common = {"model": MODEL, "instructions": fresh_instructions(), "store": True}
    with ws(client) as first_socket:
        head = completed(first_socket, input="Hi.", **common)
        second = completed(first_socket, input=NEXT, previous_response_id=head.id, **common)
    # Stored or not, the socket that made the previous response serves it from memory.
    assert spans(server, second.id)["hydration"]["detail"]["source"] == "connection_cache"

    new_item = {"role": "user", "content": "And after that?"}
    with ws(client) as new_socket:
        third = completed(new_socket, input=[new_item], previous_response_id=second.id, **common)
    assert third.previous_response_id == second.id

    # A cache miss with store=true hydrates the whole chain from the store; the server-wide
    # render cache (the sprint's) still holds its rendering, so only the new item is tokenized.
    trace = spans(server, third.id)
    assert trace["hydration"]["detail"]["source"] == "store"
    assert trace["hydration"]["items"] == 4
    assert trace["render"]["detail"]["cache"] == "render_cache"
    assert trace["render"]["tokens"] == block_tokens({"type": "message", **new_item})
    # ... and arrives at the same prompt the cache path would have built.
    second_trace = spans(server, second.id)
    expected_prompt = (
        second_trace["render"]["detail"]["prompt_tokens"]
        + sum(block_tokens(output_dict(o)) for o in second.output)
        + block_tokens({"type": "message", **new_item})
    )
    assert trace["render"]["detail"]["prompt_tokens"] == expected_prompt

    for response in (head, second, third):
        stored = client.responses.retrieve(response.id)
        assert stored.status == "completed"
        assert stored.store is True
        assert [o.id for o in stored.output] == [o.id for o in response.output]
        assert stored.output_text == response.output_text
        assert stored.usage.input_tokens == response.usage.input_tokens
    assert client.responses.retrieve(third.id).previous_response_id == second.id
    items = client.responses.input_items.list(third.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]
    content = items.data[0].content  # the item as sent (a string) or as parts: both are the same text
    text = content if isinstance(content, str) else "".join(part.text for part in content)
    assert text == "And after that?"
    assert items.data[0].id, "a stored input item gets an id"


def test_unstored_response_cannot_be_chained_from_a_new_socket(client: OpenAI) -> None:
    """store=false: nothing persisted, so another connection has no fallback."""
    with ws(client) as first_socket:
        head = completed(first_socket, model=MODEL, input="Hi.", store=False)
    with ws(client) as new_socket:
        _, err = turn(new_socket, model=MODEL, input=NEXT, previous_response_id=head.id, store=False)
        assert err.type == "error"
        assert err.status == 400
        assert err.error.code == "previous_response_not_found"
        completed(new_socket, model=MODEL, input="Still here?", store=False)
    # Nothing was written: the response is not retrievable over HTTP either.
    with pytest.raises(NotFoundError):
        client.responses.retrieve(head.id)


# ---------------------------------------------------------------- lanes through the SDK


def test_sdk_forks_a_conversation_onto_a_new_stream_id(client: OpenAI, server: LabkitServer) -> None:
    """The guide's pattern: ``store: false``, and a new ``stream_id`` forked from a response of
    another lane, served from the connection cache; every event names its lane."""
    common = {"model": MODEL, "store": False}
    with ws(client) as conn:
        events_a, last_a = turn(conn, input="Lane a.", stream_id="a", **common)
        assert {e.stream_id for e in events_a} == {"a"}
        a = last_a.response

        events_b, fork = turn(conn, input=NEXT, previous_response_id=a.id, stream_id="b", **common)
        assert fork.type == "response.completed", fork
        assert {e.stream_id for e in events_b} == {"b"}
        _, on_a = turn(conn, input=NEXT, previous_response_id=a.id, stream_id="a", **common)
        assert on_a.type == "response.completed"
        # A fork of a response no lane holds is refused on its own lane, named by stream_id.
        _, err = turn(conn, input=NEXT, previous_response_id="resp_unknown", stream_id="c", **common)
        assert err.type == "error" and err.error.code == "previous_response_not_found"
        assert err.stream_id == "c"
    assert fork.response.previous_response_id == a.id
    for response in (fork.response, on_a.response):
        trace = spans(server, response.id)
        assert trace["hydration"]["detail"]["source"] == "connection_cache"
        assert trace["render"]["items"] == 1


def test_sdk_background_is_refused_over_websocket(client: OpenAI) -> None:
    with ws(client) as conn:
        events, err = turn(conn, model=MODEL, input="Hi.", background=True, store=False)
        assert [e.type for e in events] == ["error"]
        assert err.status == 400
        assert err.error.type == "invalid_request_error"
        assert err.error.param == "background"
        completed(conn, model=MODEL, input="Hi.", store=False)


@pytest.mark.parametrize("store", [True, False])
def test_sdk_text_turn_event_sequence(client: OpenAI, store: bool) -> None:
    with ws(client) as conn:
        events, last = turn(conn, model=MODEL, input="Say hello.", store=store)
    assert last.type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == last.response.output_text
    assert last.response.usage.output_tokens > 0


def test_a_stored_turn_after_an_unstored_one_keeps_the_whole_history(
    client: OpenAI, server: LabkitServer
) -> None:
    """A (store=false) -> B (store=true, from the cache) -> C on a new socket: C sees A's items too."""
    instructions = fresh_instructions()
    with ws(client) as conn:
        a = completed(conn, model=MODEL, instructions=instructions, input="First message.", store=False)
        b = completed(
            conn, model=MODEL, instructions=instructions, previous_response_id=a.id, input=NEXT, store=True
        )
    with ws(client) as conn:
        c = completed(
            conn, model=MODEL, instructions=instructions, previous_response_id=b.id, input=NEXT, store=True
        )
    hydrate = spans(server, c.id)["hydration"]
    assert hydrate["detail"]["source"] == "store"
    assert hydrate["items"] == 4  # A's input and output, B's input and output
    assert c.usage.input_tokens > b.usage.input_tokens
