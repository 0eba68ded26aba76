"""Every model has a context window: past it the API's own refusal, and ``truncation: "auto"``.

A real server on loopback, driven by the official ``openai`` SDK (HTTP, SSE and WebSocket mode)
and, for an appended rollout, a raw socket. The server is given a model with a small window
(``tiny``: 1,000 tokens, 200 kept for the output, so an input reads at most 800) by a
``--models`` file: the window is an input, as every model's is, and a small one lets a few
short messages reach it. Every count is exact: a user message of ``n`` tokens renders to
``n + 4`` (``labkit.engine.render``), the empty system block to 4, and the assistant's turn
opener adds 2 (``labkit.server.stages.context_window.prompt_tokens``).

What is checked is behaviour and mechanism: the error's shape on each wire, which items go
and what ``usage`` then says, that a follow-up continues the window the model read whether it
comes from the connection cache (appended to the truncated rendering) or from the store
(rendered again), that a refused create leaves the socket and its cache serving, and that a
compaction pass or an appended rollout's later segment keeps to the window too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from openai import BadRequestError, OpenAI
from websockets.sync.client import connect

from labkit.api.extensions import DESIGN_HEADER
from labkit.api.requests import parse_tool
from labkit.client.launcher import LabkitServer
from labkit.engine.catalogue import ModelSpec
from labkit.engine.render import GENERATION_PROMPT, encode_block, item_block, system_block
from labkit.scenarios import FETCH_TOOL
from labkit.text.passage import text_of_tokens
from labkit.text.tokenizer import encode_text
from tests.helpers import API_KEY, auth_headers, server_spans

MODEL = "tiny"
WINDOW, OUTPUT = 1_000, 200
LIMIT = WINDOW - OUTPUT  # what an input may read
BARE = len(encode_block(*system_block(None, []))) + len(GENERATION_PROMPT)  # no instructions, no tools
API_SENTENCE = "Your input exceeds the context window of this model. Please adjust your input and try again."
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def message(tokens: int, tag: str = "") -> dict[str, Any]:
    """A user message whose block is exactly ``tokens`` long, its text starting with ``tag``."""
    guess = tokens - 4 - len(encode_text(tag))
    for size in sorted(range(guess - 3, guess + 4), key=lambda n: abs(n - guess)):
        item = {"type": "message", "role": "user", "content": tag + text_of_tokens(size)}
        if block(item) == tokens:  # a tag's last token may merge with the text's first
            return item
    raise AssertionError(f"no message of {tokens} tokens starts with {tag!r}")


def block(item: dict[str, Any]) -> int:
    return len(encode_block(*item_block(item)))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:  # shadows conftest's
    models = tmp_path_factory.mktemp("models") / "models.toml"
    models.write_text(
        f'[models.{MODEL}]\ndescription = "a small window"\ndecode_tps = 100000\nprefill_tps = 1000000000\n'
        f"context_window = {WINDOW}\nmax_output_tokens = {OUTPUT}\n"
    )
    with LabkitServer(args=["--profile", "local", "--models", str(models)]) as running:
        yield running


@pytest.fixture
def client(server: LabkitServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as c:
        yield c


def refusal(exc: BadRequestError) -> dict[str, Any]:
    """The error of a 400, checked to be the API's context-window refusal."""
    assert exc.status_code == 400
    error = exc.body if "code" in exc.body else exc.body["error"]  # type: ignore[operator,index]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input", error
    assert error["type"] == "invalid_request_error" and error["message"].startswith(API_SENTENCE)
    return error


def render_details(server: LabkitServer, response_id: str) -> list[dict[str, Any]]:
    return [s["detail"] for s in server_spans(server.base_url, response_id) if s["stage"] == "render"]


# ---------------------------------------------------------------- refused past the window


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_input_past_the_window_is_the_apis_400(client: OpenAI, stream: bool) -> None:
    """Over HTTP, JSON or SSE: refused before ``response.created``, so both are a 400 the SDK
    raises at the call; the message says by how much."""
    over = [message(200) for _ in range(4)]  # 4 + 800 + 2 = 806 tokens
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model=MODEL, input=over, store=False, stream=stream)
    error = refusal(refused.value)
    assert f"The input is {BARE + 800} tokens; {MODEL} reads at most {LIMIT}" in error["message"]


def test_the_limit_is_the_window_less_the_output_part_whatever_the_request_asks(client: OpenAI) -> None:
    fits = client.responses.create(model=MODEL, input=[message(LIMIT - BARE)], store=False)
    assert fits.usage is not None and fits.usage.input_tokens == LIMIT
    # A small max_output_tokens does not give the input more room (the API's reference says so).
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(
            model=MODEL, input=[message(LIMIT - BARE + 1)], store=False, max_output_tokens=16
        )
    refusal(refused.value)


def test_a_refused_create_leaves_the_socket_and_its_cache_serving(client: OpenAI) -> None:
    """WebSocket mode: an ``error`` event (status 400, on the create's lane), the socket serves
    on, and a fork refused on another lane leaves the response it named as it was: its own
    lane continues it, counted as a fresh render of the same conversation counts it."""
    first, follow = message(300), message(100)
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input=[first], store=False, stream_id="a")
        parent = next(e for e in conn if e.type in TERMINAL).response
        conn.response.create(
            model=MODEL, input=[message(500)], store=False, previous_response_id=parent.id, stream_id="b"
        )
        event = next(e for e in conn if e.type in TERMINAL | {"error"})
        assert event.type == "error" and event.stream_id == "b", event
        raw = event.model_dump()
        assert raw["status"] == 400 and raw["error"]["code"] == "context_length_exceeded", raw
        assert raw["error"]["param"] == "input"
        conn.response.create(
            model=MODEL, input=[follow], store=False, previous_response_id=parent.id, stream_id="a"
        )
        after = next(e for e in conn if e.type in TERMINAL | {"error"})
    assert after.type == "response.completed", after
    whole = [first, *[o.model_dump(exclude_none=True) for o in parent.output], follow]
    fresh = client.responses.create(model=MODEL, input=whole, store=False)
    assert after.response.usage.input_tokens == fresh.usage.input_tokens  # type: ignore[union-attr]


def test_the_newest_item_alone_past_the_window_is_refused_even_with_auto(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(
            model=MODEL, input=[message(100), message(LIMIT)], store=False, truncation="auto"
        )
    refusal(refused.value)


def test_a_compaction_pass_reads_its_window_within_the_model_s(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as refused:
        client.responses.compact(model=MODEL, input=[message(300) for _ in range(3)])
    refusal(refused.value)


# ---------------------------------------------------------------- truncation: "auto"


def test_compaction_without_a_threshold_compacts_before_the_model_would_refuse(client: OpenAI) -> None:
    """``context_management`` without ``compact_threshold`` compacts at the model's own threshold
    (a share of its input limit, ``ModelSpec.compact_threshold``), so a conversation that grows
    towards the window compacts first instead of being refused at it."""
    tiny = ModelSpec(MODEL, 1, 1, context_window=WINDOW, max_output_tokens=OUTPUT)  # as the server has it
    between = [message(150, f"m{i}") for i in range(5)]  # past the threshold, under the limit
    assert tiny.compact_threshold < 5 * 150 + BARE <= LIMIT
    manage = [{"type": "compaction"}]
    response = client.responses.create(model=MODEL, input=between, context_management=manage)  # type: ignore[arg-type]
    assert response.output[0].type == "compaction"
    short = client.responses.create(model=MODEL, input=between[:2], context_management=manage)  # type: ignore[arg-type]
    assert short.output[0].type != "compaction"


def test_an_answer_stops_at_the_part_of_the_window_kept_for_the_output(client: OpenAI) -> None:
    """However long the model would write, and whatever the request allows, an answer ends
    ``incomplete`` once it has used its model's output allowance."""
    for asked in (None, 10 * OUTPUT):
        response = client.responses.create(model=MODEL, input="Write 3000 tokens.", max_output_tokens=asked)
        assert response.status == "incomplete"
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert response.usage is not None and response.usage.output_tokens == OUTPUT


def test_auto_drops_the_oldest_items_and_usage_counts_what_was_read(
    client: OpenAI, server: LabkitServer
) -> None:
    items = [message(200, tag=f"m{i} ") for i in range(4)]  # 806 tokens: one item must go
    response = client.responses.create(model=MODEL, input=items, truncation="auto")
    assert response.truncation == "auto" and response.status == "completed"
    assert response.usage is not None and response.usage.input_tokens == BARE + 600
    # The model read the three newest: they are the response's input from now on.
    kept = client.responses.input_items.list(response.id, order="asc").data
    assert [part.text for item in kept for part in item.content][:3] == [i["content"] for i in items[1:]]  # type: ignore[union-attr]
    truncated = render_details(server, response.id)[-1]
    assert truncated["truncated_items"] == 1 and truncated["truncated_tokens"] == 200
    # The prompt cut out of the rendering is the one a fresh render of those items gives.
    fresh = client.responses.create(model=MODEL, input=items[1:], store=False)
    assert fresh.usage is not None and fresh.usage.input_tokens == response.usage.input_tokens


def test_a_tool_output_goes_with_its_call(client: OpenAI) -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "fetch", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": text_of_tokens(296)}
    system = len(encode_block(*system_block(None, [parse_tool(FETCH_TOOL, "tools[0]")])))
    bare = system + len(GENERATION_PROMPT)
    last = LIMIT + 110 - bare - 100 - block(call) - block(output)  # past the limit by 110
    items = [message(100), call, output, message(last)]
    response = client.responses.create(model=MODEL, input=items, tools=[FETCH_TOOL], truncation="auto")
    kept = client.responses.input_items.list(response.id, order="asc").data
    # The first message (100) is not enough, the call makes it; the output, its call gone, goes too.
    assert [item.type for item in kept] == ["message"]
    assert response.usage is not None and response.usage.input_tokens == bare + last


def conversation(turns: int) -> list[dict[str, Any]]:
    """One user message a turn, tagged so each is its own, each 250 tokens."""
    run = uuid.uuid4().hex[:8]
    return [message(250, tag=f"{run} turn {i}: ") for i in range(turns)]


def test_a_follow_up_continues_the_window_the_model_read_on_every_path(
    client: OpenAI, server: LabkitServer
) -> None:
    """The same conversation three ways, truncated every turn once it is full: chained over the
    WebSocket's connection cache (each turn appended to the truncated rendering kept there),
    chained over HTTP from the store (each turn rendered again, under the naive design), and
    stateless (the whole history sent every turn, the server dropping the same oldest items).
    The model reads the same prompt on all three, within the limit every time."""
    said = conversation(6)
    counts: dict[str, list[int]] = {"socket": [], "store": [], "stateless": []}
    socket_ids: list[str] = []
    with client.responses.connect() as conn:
        previous = None
        for item in said:
            conn.response.create(
                model=MODEL, input=[item], store=False, truncation="auto", previous_response_id=previous
            )
            done = next(e for e in conn if e.type in TERMINAL | {"error"})
            assert done.type == "response.completed", done
            previous = done.response.id
            socket_ids.append(previous)
            counts["socket"].append(done.response.usage.input_tokens)
    naive = {DESIGN_HEADER: "naive"}
    previous, history = None, []
    for item in said:
        chained = client.responses.create(
            model=MODEL, input=[item], truncation="auto", previous_response_id=previous, extra_headers=naive
        )
        previous = chained.id
        counts["store"].append(chained.usage.input_tokens)  # type: ignore[union-attr]
        history.append(item)
        alone = client.responses.create(model=MODEL, input=history, store=False, truncation="auto")
        counts["stateless"].append(alone.usage.input_tokens)  # type: ignore[union-attr]
        history += [o.model_dump(exclude_none=True) for o in alone.output]
    assert counts["socket"] == counts["store"] == counts["stateless"], counts
    assert max(counts["socket"]) <= LIMIT and counts["socket"][-1] < BARE + 250 * len(said)
    # On the socket, the turn after a truncated one renders only its new item onto the kept rendering.
    details = [render_details(server, rid) for rid in socket_ids]
    truncated = [i for i, d in enumerate(details) if any("truncated_items" in x for x in d)]
    assert truncated and truncated[0] + 1 < len(said)
    after = details[truncated[0] + 1][0]
    assert after["cache"] == "connection_cache" and after["copied_ids"] == 0


# ---------------------------------------------------------------- an appended rollout's later segment


def test_an_appended_rollout_that_outgrows_the_window_fails_in_the_api_s_words(server: LabkitServer) -> None:
    """Its first segment fits; the tool output appended after the pause takes it past the
    window, so the response (created long before) ends ``response.failed`` with the refusal."""
    with connect(
        server.ws_url + "?design=appended", additional_headers=auth_headers(), open_timeout=10, max_size=None
    ) as ws:
        ws.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": MODEL,
                    "tools": [FETCH_TOOL],
                    "input": "Fetch what you need.",
                    "metadata": {"labkit_scenario": "synthetic:turns=2,output_tokens=20,tool_tokens=50"},
                }
            )
        )
        pause = until(ws, "response.done")
        outputs = [
            {"type": "function_call_output", "call_id": call["call_id"], "output": text_of_tokens(LIMIT)}
            for call in pause["pending_calls"]
        ]
        ws.send(
            json.dumps({"type": "response.append", "response_id": pause["response_id"], "input": outputs})
        )
        failed = until(ws, "response.failed")
    assert failed["response"]["error"]["code"] == "context_length_exceeded"


def until(ws: Any, kind: str) -> dict[str, Any]:
    while True:
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == kind or event["type"] not in TERMINAL | {"error", "response.done"}, event
        if event["type"] == kind:
            return event
