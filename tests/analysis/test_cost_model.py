"""The cost model's formulas on a hand-computed case (round numbers, no CPU costs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from labkit.analysis.cost_model import end_to_end, mean_ttft, predict
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.shape import Shape, TurnShape
from labkit.profiles import (
    Auth,
    BillingHop,
    Engine,
    IntermediaryHop,
    Network,
    Profile,
    RoutingHop,
    Safety,
)

PROFILE = Profile(
    name="hand",
    network=Network(rtt_ms=20, tcp_handshake_round_trips=1, tls_handshake_round_trips=1),
    auth=Auth(hop_ms=5),
    safety=Safety(hop_ms=10, ms_per_1k_tokens=2, fast_hop_ms=4, fast_ms_per_1k_tokens=1),
    routing=RoutingHop(model_config_hop_ms=8),
    intermediary=IntermediaryHop(hop_ms=12),
    billing=BillingHop(hop_ms=10),
    engine=Engine(replicas=1, block_size=16, cache_capacity_tokens=100_000, max_concurrent=1),
)
SHAPE = Shape(
    system_tokens=1000,
    turns=(
        TurnShape(
            new_tokens=100, new_items=1, output_items=1, output_tokens=50, output_block_tokens=60, tool_s=0.1
        ),
        TurnShape(new_tokens=500, new_items=1, output_items=1, output_tokens=20, output_block_tokens=30),
    ),
)
NO_CPU = CpuCosts(
    tokenize_s_per_token=0,
    scan_s_per_token=0,
    client_s_per_sent_item=0,
    client_s_per_sent_token=0,
    fixed_s_per_turn=0,
    http_request_s=0,
    ws_request_s=0,
    inject_s=0,
    inject_s_per_item=0,
    timer_overrun_s=0,
)


def run(design: str) -> list:
    return predict(design, PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=NO_CPU)


def test_naive_by_hand() -> None:
    first, second = run("naive")
    # connect 40 + auth 5 + rtt 20 + classifier 10 + 2 ms/1k * 100 + config 8 + intermediary 12
    # + prefill 1100/10k + first token 1 + 49 more tokens + output classifier 10 + 2 * 0.05 + billing 10
    # + tools 100
    assert first.total == pytest.approx(0.3753)
    assert first.ttft == pytest.approx(0.2062)
    # history 160 + new 500 scanned; prefill the new 500 + half a block; no new connection
    assert second.total == pytest.approx(0.14716)
    assert end_to_end(run("naive")) == pytest.approx(0.52246)


def test_websocket_by_hand() -> None:
    first, second = run("websocket")
    # handshakes 40 + upgrade 20 at the start; fast classifier; no intermediary; billing overlapped
    assert first.total == pytest.approx(0.36115)
    # only the network, the new items' scan and inference remain
    assert second.total == pytest.approx(0.09932)
    assert mean_ttft([second]) == pytest.approx(0.020 + 0.0045 + 0.0508 + 0.001)


def test_appended_pays_pre_and_post_inference_once() -> None:
    first, second = run("appended")
    assert {"hydration", "routing"} <= set(first.api)
    assert not {"hydration", "routing"} & set(second.api)
    # the appended tool output is new input, classified alone: 4 ms + 1 ms/1k * 500
    assert second.api["input_safety"] == pytest.approx(0.0045)
    assert "output_safety" not in first.api and "output_safety" in second.api
    # the output classifier at the end scans every segment's output: 4 ms + 1 ms/1k * 70
    assert second.api["output_safety"] == pytest.approx(0.00407)


def test_fresh_connections_pay_the_handshake_every_turn() -> None:
    keep = predict("naive", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=NO_CPU)
    fresh = predict(
        "naive", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=NO_CPU, fresh_connection=True
    )
    assert end_to_end(fresh) - end_to_end(keep) == pytest.approx(0.040)


def test_cpu_costs_scale_with_what_is_sent() -> None:
    cpu = replace(
        NO_CPU,
        tokenize_s_per_token=1e-6,
        scan_s_per_token=2e-6,
        client_s_per_sent_item=1e-3,
        client_s_per_sent_token=1e-6,
        http_request_s=2e-3,
        ws_request_s=3e-3,
        inject_s=0.5e-3,
        inject_s_per_item=2e-3,
    )
    naive = predict("naive", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=cpu)
    ws = predict("websocket", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=cpu)
    appended = predict("appended", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=cpu)
    prototype = predict(
        "appended+prototype_wire", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=cpu
    )
    # turn 2: naive sends 3 items / 660 tokens over HTTP, websocket 1 item / 500 tokens as an event
    assert naive[1].build == pytest.approx(2e-3 + 3e-3 + 660e-6)
    assert ws[1].build == pytest.approx(3e-3 + 1e-3 + 500e-6)
    # appended: the SDK's beta create first (as websocket's), then an inject of the 1 tool output
    assert appended[0].build == pytest.approx(ws[0].build)
    assert appended[1].build == pytest.approx(0.5e-3 + 2e-3 + 500e-6)
    assert [t.build for t in prototype] == [0, 0]  # raw JSON frames, no SDK
    # naive renders the system block and everything; websocket only the new items
    assert naive[1].api["render"] == pytest.approx(1660e-6)
    assert ws[1].api["render"] == pytest.approx(500e-6)


def test_both_wires_of_the_appended_design_price_the_same_pipeline() -> None:
    """The inject wire and the prototype's run the same plan: every stage of every turn costs the
    same; only the client's building of its frames differs (the SDK's, or raw JSON)."""
    cpu = CpuCosts()
    inject, prototype = (
        predict(d, PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=cpu)
        for d in ("appended", "appended+prototype_wire")
    )
    assert [t.stages for t in inject] == [t.stages for t in prototype]
    assert [t.tokens for t in inject] == [t.tokens for t in prototype]
    assert [t.build for t in prototype] == [0, 0]
    assert all(t.build > 0 for t in inject)
    without_sdk = replace(cpu, ws_request_s=0, inject_s=0, inject_s_per_item=0, client_s_per_sent_item=0)
    without_sdk = replace(without_sdk, client_s_per_sent_token=0)
    priced = predict("appended", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=without_sdk)
    assert end_to_end(priced) == pytest.approx(end_to_end(prototype))


def test_every_modeled_delay_pays_the_timer_overrun() -> None:
    late = replace(NO_CPU, timer_overrun_s=0.001)
    first = predict("naive", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=late)[0]
    on_time = predict("naive", PROFILE, SHAPE, decode_tps=1000, prefill_tps=10_000, cpu=NO_CPU)[0]
    # connect, uplink, auth, input_safety, routing, intermediary, downlink, prefill, output_safety,
    # billing sleep; decode keeps its deadlines, and validation, hydration, render, retain do not sleep
    assert first.total - on_time.total == pytest.approx(10 * 0.001)


def test_shape_of_a_synthetic_scenario() -> None:
    from labkit.engine.render import encode_block
    from labkit.scenarios import synthetic

    shape = Shape.of(synthetic(turns=3, output_tokens=20, tool_tokens=100, instruction_tokens=50))
    assert len(shape.turns) == 3
    assert all(abs(t.output_tokens - 20) <= 1 for t in shape.turns)  # calls: JSON around a note
    assert [t.new_items for t in shape.turns] == [1, 1, 1]
    # markup and a header naming a call id (48 random hex digits: 20 to 40 tokens), then 100 tokens
    markup = len(encode_block("tool call_id=call_", ""))
    assert all(100 + markup + 15 <= t.new_tokens <= 100 + markup + 45 for t in shape.turns[1:])
    assert all(t.output_block_tokens > t.output_tokens for t in shape.turns)
