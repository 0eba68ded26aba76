"""The API-service pipeline under each design, checked by its mechanism, never by the clock.

Every assertion reads what the server says it did (its spans: how many items and
tokens each stage processed, where the history came from, which replica served a
request) or what it wrote (billing ledger rows in SQLite), and compares that with
what the client really sent. Nothing here measures a duration: the designs differ
in *how much work* each stage does, and that is what is checked.

Most tests share four 10-turn rollouts of one synthetic scenario, run once against a
``--profile local`` server (no modeled delays, so they are fast). The transport each
rollout uses is wrapped to record every request it sent, so the expected counts are
computed from the real items, not from constants.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import httpx
import pandas as pd
import pytest
from websockets.exceptions import InvalidStatus

from labkit import designs
from labkit.analysis.cost_model import predict
from labkit.analysis.metrics import summary
from labkit.analysis.shape import Shape
from labkit.api.extensions import DESIGN_HEADER
from labkit.client import agent
from labkit.client.agent import Rollout
from labkit.client.frame import COLUMNS
from labkit.client.launcher import LabkitServer
from labkit.client.transports import Transport, TurnRequest, TurnResult
from labkit.engine.render import encode_block, item_block
from labkit.engine.safety import classifier_texts, scan
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.scenarios import synthetic
from labkit.text.tokenizer import encode_text
from tests.helpers import (
    auth_headers,
    by_stage,
    server_spans,
    two_http_turns,
    wait_for_rows,
    ws_connect,
    ws_turn,
)

MODEL = "labkit-spark"
TURNS = 10
TOOL_TOKENS = 200
SCENARIO = synthetic(turns=TURNS, output_tokens=20, tool_tokens=TOOL_TOKENS, instruction_tokens=300)
# Sprint runs first, so it meets the fresh server's cold model-configuration cache.
DESIGNS = ("sprint", "naive", "websocket", "appended")
REPO_DATA = default_data_dir()


# ---------------------------------------------------------------- helpers


def block_tokens(items: list[dict[str, Any]]) -> int:
    """Tokens the chat template renders these items to (what a render stage encodes)."""
    return sum(len(encode_block(*item_block(item))) for item in items)


def scanned_tokens(items: list[dict[str, Any]]) -> int:
    """Tokens the safety classifier reads for these items."""
    return scan(classifier_texts(items)).tokens


# ---------------------------------------------------------------- the shared rollouts


class Recording:
    """A transport that remembers every request it sent and every result it got."""

    def __init__(self, inner: Transport, log: list[tuple[TurnRequest, TurnResult]]) -> None:
        self.inner, self.log, self.design = inner, log, inner.design

    def turn(self, request: TurnRequest) -> TurnResult:
        result = self.inner.turn(request)
        self.log.append((request, result))
        return result

    def close(self) -> None:
        self.inner.close()


@dataclass
class Observed:
    """One rollout: the client's records, the server's spans, and what was sent each turn."""

    design: str
    rollout: Rollout
    sent: list[TurnRequest] = field(default_factory=list)
    results: list[TurnResult] = field(default_factory=list)

    def spans(self, turn: int) -> list[dict[str, Any]]:
        spans = self.rollout.spans[self.rollout.records[turn].response_id]
        if self.design == "appended":  # one response; its turns are the spans' segments
            spans = [s for s in spans if s["segment"] == turn]
        return spans

    def stage(self, turn: int, name: str) -> dict[str, Any]:
        found = [s for s in self.spans(turn) if s["stage"] == name]
        assert len(found) == 1, f"{self.design} turn {turn}: {len(found)} '{name}' spans"
        return found[0]

    def stages(self, turn: int) -> list[str]:
        return [s["stage"] for s in self.spans(turn)]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    db = tmp_path_factory.mktemp("pipeline") / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", "local"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def observed(local: LabkitServer) -> dict[str, Observed]:
    runs: dict[str, Observed] = {}
    real_open = agent.open_transport
    with pytest.MonkeyPatch.context() as patch:
        for design in DESIGNS:
            log: list[tuple[TurnRequest, TurnResult]] = []
            patch.setattr(
                agent, "open_transport", lambda *a, log=log, **k: Recording(real_open(*a, **k), log)
            )
            rollout = Rollout.run(local.base_url, design, SCENARIO, model=MODEL)
            runs[design] = Observed(design, rollout, [r for r, _ in log], [r for _, r in log])
    return runs


def test_every_design_completes_the_scenario(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        assert len(run.rollout.records) == TURNS, design
        assert [len(r.calls) for r in run.rollout.records] == [1] * (TURNS - 1) + [0], design
        assert run.results[-1].status == "completed", design
        # The client sends the whole history over HTTP, only the new items otherwise.
        for turn, request in enumerate(run.sent):
            assert len(request.history) == 1 + 2 * turn
            assert len(request.new) == 1


# ---------------------------------------------------------------- 1. what each stage processes


def test_a_rollout_records_the_stages_its_plan_names_and_the_cost_model_prices(
    observed: dict[str, Observed],
) -> None:
    """Turn by turn, for every design: the stages the server ran are the stages the cost model
    prices (both read the design's plan), and the size-dependent ones worked over what it says."""
    shape = Shape.of(SCENARIO)
    profile = load_profile("local", REPO_DATA)
    for design, run in observed.items():
        predicted = predict(design, profile, shape, decode_tps=1000, prefill_tps=50_000)
        plan = designs.DESIGNS[design].plan
        assert len(predicted) == len(run.rollout.records) == TURNS, design
        for turn, cost in enumerate(predicted):
            recorded = run.stages(turn)
            assert sorted(recorded) == sorted(cost.stages), (design, turn)
            assert sorted(recorded) == sorted(plan.stages_on(turn, last=turn == TURNS - 1)), (design, turn)
            for stage in ("input_safety", "render"):
                # The model counts rendered tokens; the classifier reads the text without the
                # template's special tokens, and random call ids tokenize to a few tokens more or
                # less: close, not equal. Whole history against new items differs far more.
                span = run.stage(turn, stage)
                slack = 12 + 20 * span["items"]
                assert cost.tokens[stage] == pytest.approx(span["tokens"], rel=0.05, abs=slack), (
                    design,
                    turn,
                    stage,
                )


def test_naive_scans_and_renders_the_whole_history_every_turn(observed: dict[str, Observed]) -> None:
    run = observed["naive"]
    safety_tokens, render_tokens = [], []
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        assert safety["items"] == len(request.history) == 1 + 2 * turn
        assert safety["tokens"] == scanned_tokens(request.history)
        assert render["detail"]["cache"] == "none"
        assert render["items"] == len(request.history)
        assert render["tokens"] == render["detail"]["prompt_tokens"]  # the whole prompt, every turn
        safety_tokens.append(safety["tokens"])
        render_tokens.append(render["tokens"])
    assert all(b > a for a, b in pairwise(safety_tokens))
    assert all(b > a for a, b in pairwise(render_tokens))
    # Each turn the history grows by a call and its ~200-token output, and all of it is redone.
    assert render_tokens[-1] - render_tokens[0] > (TURNS - 1) * TOOL_TOKENS


def test_websocket_scans_and_renders_only_the_new_items(observed: dict[str, Observed]) -> None:
    run = observed["websocket"]
    bodies = set()
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        if turn == 0:
            assert render["detail"]["cache"] == "miss"
            assert render["tokens"] == render["detail"]["prompt_tokens"]
            continue
        assert [item["type"] for item in request.new] == ["function_call_output"]
        assert safety["items"] == 1
        assert safety["tokens"] == scanned_tokens(request.new)
        assert render["detail"]["cache"] == "connection_cache"
        assert render["items"] == 1
        assert render["tokens"] == block_tokens(request.new)
        # Constant across turns: 3 markup tokens + the tool output; only the call id's header varies.
        header, _ = item_block(request.new[0])
        bodies.add(render["tokens"] - len(encode_text(header)))
        # The prompt still grows with the whole conversation: rendered tokens were appended to.
        before = run.spans(turn - 1)
        grown = (
            sum(by_stage(before)[stage]["tokens"] for stage in ("retain", "decode"))
            + by_stage(before)["render"]["detail"]["prompt_tokens"]
        )
        assert render["detail"]["prompt_tokens"] == grown + render["tokens"]
    assert bodies == {TOOL_TOKENS + 3}


# A rollout long enough that the history grows ~30x between its early and late follow-ups, while
# each turn adds the same: one tool output of LONG_TOOL_TOKENS and a call of 20 tokens.
LONG_TURNS = 40
LONG_TOOL_TOKENS = 1000
BLOCK = 16  # the local profile's prefix-cache block size


def test_a_websocket_follow_up_works_only_on_what_is_new(local: LabkitServer) -> None:
    """Render, prefill and retain of a connection-cached follow-up touch only the new blocks and
    items, counted by the server (blocks hashed, cache entries touched, ids copied), the same at
    ~40k tokens of history as at ~2k: nothing in them grows with the conversation."""
    scenario = synthetic(
        turns=LONG_TURNS, output_tokens=20, tool_tokens=LONG_TOOL_TOKENS, instruction_tokens=0
    )
    rollout = Rollout.run(local.base_url, "websocket", scenario, model=MODEL)
    assert len(rollout.records) == LONG_TURNS
    counts, prompts = [], []
    for record in rollout.records[1:]:
        spans = by_stage(rollout.spans[record.response_id])
        render, prefill, retain = spans["render"], spans["prefill"], spans["retain"]
        assert render["detail"]["cache"] == "connection_cache"
        assert render["items"] == 1  # the tool output: the only new item
        assert render["detail"]["copied_ids"] == 0  # the history's ids are shared, not copied
        assert retain["detail"]["copied_ids"] == 0  # ... and so is the render cache's entry
        assert retain["detail"]["hashed_items"] == 2  # the render cache's hash: last output + new item
        # The prompt adds the new item's block and the 2-token generation prompt; the blocks after
        # the keys retained last turn are hashed (once to look up, once to insert), nothing else.
        new_blocks = (render["tokens"] + 2) // BLOCK + 1
        assert prefill["detail"]["hashed_blocks"] <= 2 * new_blocks
        assert prefill["detail"]["touched_blocks"] <= new_blocks + 8  # a few probes and refreshes
        # Retain adds the sampled output's block to the same buffer: again only the new blocks.
        grown = render["tokens"] + retain["tokens"] + spans["decode"]["tokens"]
        assert retain["detail"]["hashed_blocks"] <= grown // BLOCK + 1
        assert retain["detail"]["touched_blocks"] <= retain["detail"]["hashed_blocks"] + 4
        counts.append(
            (
                prefill["detail"]["hashed_blocks"],
                prefill["detail"]["touched_blocks"],
                retain["detail"]["hashed_blocks"],
                retain["detail"]["touched_blocks"],
            )
        )
        prompts.append(render["detail"]["prompt_tokens"])
    assert prompts[-1] > 20 * prompts[0]  # the history grew twentyfold and more ...
    early, late = counts[:5], counts[-5:]
    # ... and the work per turn did not, beyond a block or two where the new tokens straddle a
    # block boundary differently (against ~2,400 blocks more history).
    for column in range(4):
        assert max(c[column] for c in late) <= max(c[column] for c in early) + 4, column


def test_sprint_renders_from_the_render_cache_but_scans_everything(observed: dict[str, Observed]) -> None:
    run = observed["sprint"]
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        assert safety["items"] == len(request.history)
        assert safety["tokens"] == scanned_tokens(request.history)
        if turn == 0:
            assert render["detail"]["cache"] == "miss"
            continue
        assert render["detail"]["cache"] == "render_cache"
        assert render["detail"]["copied_ids"] == 0  # a view of the cached buffer, extended in place
        # The cached prefix covers everything up to the model's own call; only the tool output is new.
        assert render["items"] == len(request.new) == 1
        assert render["tokens"] == block_tokens(request.new)
        assert render["tokens"] < render["detail"]["prompt_tokens"]


def test_hydration_source(observed: dict[str, Observed]) -> None:
    for design in ("naive", "sprint"):
        for turn in range(TURNS):
            hydration = observed[design].stage(turn, "hydration")
            assert (hydration["detail"]["source"], hydration["items"]) == ("none", 0), (design, turn)
    run = observed["websocket"]
    assert run.stage(0, "hydration")["detail"]["source"] == "none"
    for turn, request in enumerate(run.sent[1:], start=1):
        hydration = run.stage(turn, "hydration")
        assert hydration["detail"]["source"] == "connection_cache"
        assert hydration["items"] == len(request.history) - len(request.new)  # everything before


def test_routing_detail(observed: dict[str, Observed]) -> None:
    naive, sprint, websocket = observed["naive"], observed["sprint"], observed["websocket"]
    for turn in range(TURNS):
        assert naive.stage(turn, "routing")["detail"]["config_cache"] is False
        assert naive.stage(turn, "routing")["detail"]["replica"] == "replica-0"  # the profile's only one
    # Sprint ran first on a fresh server: a cold configuration cache, warm from then on.
    assert sprint.stage(0, "routing")["detail"]["config_cache"] is False
    for turn in range(1, TURNS):
        assert sprint.stage(turn, "routing")["detail"]["config_cache"] is True
    assert "replica" in websocket.stage(0, "routing")["detail"]
    for turn in range(1, TURNS):
        assert websocket.stage(turn, "routing")["detail"] == {"reused": True}


def test_intermediary_hop_only_in_naive(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        for turn in range(TURNS):
            count = run.stages(turn).count("intermediary")
            assert count == (1 if design == "naive" else 0), (design, turn)


def test_billing_blocks_over_http_and_overlaps_on_sockets(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        turns = [TURNS - 1] if design == "appended" else range(TURNS)
        for turn in turns:
            overlapped = run.stage(turn, "billing")["detail"]["overlapped"]
            assert overlapped is (design in ("websocket", "appended")), (design, turn)


# ---------------------------------------------------------------- 2. billing: one ledger row per response


def test_one_ledger_row_per_response_in_every_design(
    observed: dict[str, Observed], local: LabkitServer
) -> None:
    for design, run in observed.items():
        ids = list(dict.fromkeys(r.response_id for r in run.rollout.records))
        assert len(ids) == (1 if design == "appended" else TURNS), design
        rows = wait_for_rows(local.db, ids)
        final = {r.response_id: r for r in run.results if r.usage is not None}
        for rid in ids:
            assert len(rows[rid]) == 1, (design, rid, rows[rid])
            usage = final[rid].usage
            assert usage is not None
            expected = (
                "completed",
                usage["input_tokens"],
                usage["input_tokens_details"]["cached_tokens"],
                usage["output_tokens"],
            )
            assert rows[rid][0] == expected, design


# ---------------------------------------------------------------- 4. design selection


def test_unknown_design_header_is_a_400(server: LabkitServer) -> None:
    reply = httpx.post(
        f"{server.base_url}/responses",
        json={"model": MODEL, "input": "Hi."},
        headers={**auth_headers(), DESIGN_HEADER: "turbo"},
        timeout=30,
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        DESIGN_HEADER,
        "invalid_value",
    )
    assert "naive" in error["message"] and "appended" in error["message"]


@pytest.mark.parametrize("where", ["query", "header"])
def test_unknown_design_refuses_the_websocket_upgrade(server: LabkitServer, where: str) -> None:
    query, headers = ("?design=turbo", {}) if where == "query" else ("", {DESIGN_HEADER: "turbo"})
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(server, query, **headers)
    # A 400 in the API's error shape, naming the header (docs/protocol.md §3.1).
    assert refused.value.response.status_code == 400
    assert b'"param":"x-labkit-design"' in refused.value.response.body


def test_http_without_a_design_header_is_sprint(server: LabkitServer) -> None:
    first, second = two_http_turns(server.base_url)
    for spans in (first, second):
        assert "intermediary" not in [s["stage"] for s in spans]
        assert by_stage(spans)["billing"]["detail"]["overlapped"] is False
    assert by_stage(first)["render"]["detail"]["cache"] == "miss"
    assert by_stage(second)["render"]["detail"]["cache"] == "render_cache"
    assert by_stage(second)["routing"]["detail"]["config_cache"] is True


def test_websocket_without_a_design_is_websocket(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        first = ws_turn(ws, input="Say hello.", store=False)
        second = ws_turn(ws, input="More.", previous_response_id=first["id"], store=False)
    spans = by_stage(server_spans(server.base_url, second["id"]))
    assert spans["hydration"]["detail"]["source"] == "connection_cache"
    assert spans["render"]["detail"]["cache"] == "connection_cache"
    assert spans["billing"]["detail"]["overlapped"] is True
    assert "intermediary" not in spans


def test_serve_design_flag_changes_the_http_default() -> None:
    with LabkitServer(args=["--profile", "local", "--design", "naive"]) as srv:
        first, second = two_http_turns(srv.base_url)
        sprint_first, _ = two_http_turns(srv.base_url, **{DESIGN_HEADER: "sprint"})
    for spans in (first, second):
        stages = by_stage(spans)
        assert "intermediary" in stages
        assert stages["render"]["detail"]["cache"] == "none"
        assert stages["routing"]["detail"]["config_cache"] is False
    assert "intermediary" not in [s["stage"] for s in sprint_first]  # the header still wins


# ---------------------------------------------------------------- 5. the rollout DataFrame and metrics


@pytest.mark.parametrize("design", DESIGNS)
def test_rollout_frame(observed: dict[str, Observed], design: str) -> None:
    run = observed[design]
    frame = run.rollout.frame()
    assert list(frame.columns) == [*COLUMNS, "t"]
    assert set(frame["design"]) == {design}
    assert set(frame["bucket"]) <= {"api", "inference", "client", "observer"}
    assert set(frame["source"]) == {"server", "client"}
    for stage in ("send", "done"):
        assert frame[frame["stage"] == stage].groupby("turn").size().to_dict() == dict.fromkeys(
            range(TURNS), 1
        )
    tools = frame[frame["stage"] == "tool"].groupby("turn").size()
    for record in run.rollout.records:
        assert tools.get(record.turn, 0) == len(record.calls)
        server = frame[(frame["turn"] == record.turn) & (frame["source"] == "server")]
        assert {"prefill", "decode"} <= set(server["stage"]), record.turn
    assert frame.loc[frame["stage"] == "tool", "bucket"].eq("client").all()
    assert frame.loc[frame["stage"].isin(["queue", "prefill", "decode"]), "bucket"].eq("inference").all()
    assert frame.loc[frame["stage"].isin(["render", "input_safety", "billing"]), "bucket"].eq("api").all()
    assert (frame["duration"] >= 0).all()
    assert frame.loc[frame["stage"] == "send", "t"].min() == 0
    # Output tokens of the final turn as the client saw them at ``done``.
    done = frame[(frame["stage"] == "done") & (frame["turn"] == TURNS - 1)]
    assert int(done["tokens"].iloc[0]) == run.results[-1].usage["output_tokens"]


@pytest.mark.parametrize("design", DESIGNS)
def test_summary_metrics(observed: dict[str, Observed], design: str) -> None:
    metrics = summary(observed[design].rollout.frame())
    assert metrics["e2e_s"] > 0
    assert 0 <= metrics["api_share"] <= 1
    assert metrics["turns"] == SCENARIO.turns == TURNS
    assert not pd.isna(metrics["ttft_mean_s"])


def test_the_synchronous_client_runs_inside_a_running_event_loop() -> None:
    """Notebooks run code inside the kernel's event loop: the server handle and the client
    must not need a loop of their own."""
    import asyncio

    async def in_a_kernel() -> dict[str, float]:
        with LabkitServer(args=["--profile", "local"]) as server:
            rollout = Rollout.run(
                server.base_url, "websocket", synthetic(turns=3, tool_tokens=50), model=MODEL
            )
            return summary(rollout.frame())

    assert asyncio.run(in_a_kernel())["turns"] == 3
