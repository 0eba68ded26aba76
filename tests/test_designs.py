"""Composed designs: ``naive+render_cache`` and the like, parsed in one place and honoured everywhere.

The parser's rules are checked directly; the server, the WebSocket upgrade and a whole
rollout are then checked by what the server says it did (its spans), never by the clock.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from labkit import lab
from labkit.analysis.cpu_costs import CpuCosts
from labkit.api.extensions import DESIGN_HEADER
from labkit.api.stages import Stage
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.client.transports import AppendedRollout, StatelessHTTP, WebSocketMode, open_transport
from labkit.designs import (
    APPENDED,
    DESIGNS,
    NAIVE,
    SPRINT,
    SWITCHES,
    WEBSOCKET,
    Design,
    DesignSpecError,
    Over,
    Plan,
    Runs,
    Step,
    compose,
)
from tests.helpers import auth_headers, by_stage, server_spans, two_http_turns

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
SPRINT_PARTS = "naive+render_cache+model_config_cache+no_intermediary+fast_classifiers"
SCENARIO = "synthetic:turns=3,output_tokens=10,tool_tokens=50,instruction_tokens=50"

# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize("name", list(DESIGNS))
def test_a_bare_name_is_the_named_design(name: str) -> None:
    assert compose(name) is DESIGNS[name]


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("naive+render_cache", "naive+render_cache"),
        ("naive+fast_classifiers+render_cache", "naive+render_cache+fast_classifiers"),
        ("naive+no_intermediary+model_config_cache", "naive+model_config_cache+no_intermediary"),
        (SPRINT_PARTS, SPRINT_PARTS),
        ("websocket+no_overlapped_billing", "websocket+no_overlapped_billing"),
        ("sprint+intermediary", "sprint+intermediary"),
        ("appended+no_appended+no_connection_cache", "appended+no_connection_cache+no_appended"),
        (" naive + render_cache ", "naive+render_cache"),
    ],
)
def test_canonical_names(spec: str, canonical: str) -> None:
    assert compose(spec).name == canonical


def test_a_composed_design_sets_exactly_its_parts() -> None:
    assert compose("naive+render_cache+no_intermediary") == replace(
        NAIVE, name="naive+render_cache+no_intermediary", render_cache=True, intermediary_hop=False
    )
    assert compose("websocket+no_overlapped_billing") == replace(
        WEBSOCKET, name="websocket+no_overlapped_billing", overlapped_billing=False
    )


def test_every_mechanism_has_a_part() -> None:
    assert sorted(SWITCHES.values()) == sorted(f.name for f in fields(Design) if f.name != "name")


def test_every_part_switches_on_and_off_uniformly() -> None:
    """``part`` from the first base where it is off (and its wire's design is there), ``no_part``
    from one where it is on; the appended rollout's wire is on in no named design."""
    for part, field_name in SWITCHES.items():
        bases = [d for d in DESIGNS.values() if d.appended] if part == "prototype_wire" else DESIGNS.values()
        off = next(d for d in bases if not getattr(d, field_name))
        assert getattr(compose(f"{off.name}+{part}"), field_name) is True
        on = next((d for d in DESIGNS.values() if getattr(d, field_name)), None)
        if on is None:
            assert part == "prototype_wire"
            continue
        assert getattr(compose(f"{on.name}+no_{part}"), field_name) is False


def test_every_composed_name_composes_back_to_its_design() -> None:
    """Canonical names are fixed points: every base with every set of changes, except the
    prototype's wire without the appended rollout it is the wire of."""
    seen: set[str] = set()
    for base in DESIGNS.values():
        for n in range(len(SWITCHES) + 1):
            for chosen in itertools.combinations(SWITCHES.items(), n):
                parts = [p if not getattr(base, f) else f"no_{p}" for p, f in chosen]
                spec = "+".join([base.name, *reversed(parts)])
                toggled = dict(chosen)
                if "prototype_wire" in toggled and base.appended == ("appended" in toggled):
                    with pytest.raises(DesignSpecError, match="needs an appended design"):
                        compose(spec)
                    continue
                design = compose(spec)
                assert compose(design.name) == design
                seen.add(design.name)
    # a quarter of the combinations: the wire switched on, the appended rollout off
    assert len(seen) == len(DESIGNS) * 2 ** len(SWITCHES) * 3 // 4


def test_the_prototype_wire_is_the_appended_plan_on_another_wire() -> None:
    prototype = compose("appended+prototype_wire")
    assert prototype.plan == APPENDED.plan and prototype.transport == APPENDED.transport
    for spec in ("websocket+prototype_wire", "appended+no_appended+prototype_wire"):
        with pytest.raises(DesignSpecError, match=r"'prototype_wire' .* needs an appended design"):
            compose(spec)


def test_the_sprint_spelled_out_keeps_its_spec_as_its_name() -> None:
    design = compose(SPRINT_PARTS)
    assert design.name == SPRINT_PARTS
    assert replace(design, name="sprint") == SPRINT
    assert design.plan == SPRINT.plan


KNOWN = ["naive", "sprint", "websocket", "appended", "render_cache", "no_<part>"]


@pytest.mark.parametrize(
    ("spec", "facts"),
    [
        ("turbo", ["Unknown labkit design 'turbo'", *KNOWN]),
        ("turbo+render_cache", ["Unknown labkit design 'turbo' in 'turbo+render_cache'", *KNOWN]),
        ("naive+turbo", ["Unknown labkit design part 'turbo' in 'naive+turbo'", *KNOWN]),
        ("naive+no_turbo", ["part 'no_turbo'", *KNOWN]),
        ("naive+intermediary_hop", ["part 'intermediary_hop'"]),
        ("naive+no_", ["part 'no_'"]),
        ("", ["Missing labkit design name"]),
        ("+render_cache", ["Missing labkit design name in '+render_cache'"]),
        ("naive++render_cache", ["Empty labkit design part in 'naive++render_cache'"]),
        ("naive+render_cache+", ["Empty labkit design part"]),
        ("naive+render_cache+render_cache", ["'render_cache' appears twice"]),
        ("naive+render_cache+no_render_cache", ["'no_render_cache' contradicts 'render_cache'"]),
        ("sprint+render_cache", ["changes nothing", "'sprint' already has render_cache on"]),
        ("naive+no_appended", ["changes nothing", "'naive' already has appended off"]),
        ("naive+intermediary", ["changes nothing", "intermediary on"]),
    ],
)
def test_bad_specs_are_errors_that_say_why(spec: str, facts: list[str]) -> None:
    with pytest.raises(DesignSpecError) as raised:
        compose(spec)
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert "\n" not in message
    for fact in facts:
        assert fact in message, (fact, message)


# ---------------------------------------------------------------- plans


def test_render_cache_renders_only_the_new_items() -> None:
    assert NAIVE.plan[Stage.RENDER].over is Over.HISTORY
    step = compose("naive+render_cache").plan[Stage.RENDER]
    assert (step.over, step.saved_by) == (Over.NEW, "render cache")


def test_no_intermediary_skips_the_intermediary_stage() -> None:
    plan = compose("naive+no_intermediary").plan
    assert plan[Stage.INTERMEDIARY].runs is Runs.SKIPPED
    assert Stage.INTERMEDIARY not in plan.stages_on(0, last=True)
    assert Stage.INTERMEDIARY in NAIVE.plan.stages_on(0, last=True)


def test_other_parts_change_their_own_stages_only() -> None:
    no_overlap = compose("websocket+no_overlapped_billing").plan
    assert not no_overlap[Stage.BILLING].overlapped and WEBSOCKET.plan[Stage.BILLING].overlapped
    assert {s for s in Stage if no_overlap[s] != WEBSOCKET.plan[s]} == {Stage.BILLING}
    fast = compose("naive+fast_classifiers").plan
    assert fast[Stage.INPUT_SAFETY].saved_by == "fast classifier"
    assert fast[Stage.INPUT_SAFETY].over is Over.HISTORY  # still the whole history over HTTP
    assert compose("appended+no_appended").plan == WEBSOCKET.plan


def test_a_stage_the_plan_does_not_name_takes_its_phases_default() -> None:
    """Before inference, every turn; after it, the response's last segment: every turn, or an
    appended rollout's last turn. A new stage needs no line in ``plan_of``."""
    unnamed = (Stage.INPUT_SAFETY, Stage.OUTPUT_SAFETY)
    for design in DESIGNS.values():
        steps = {stage: step for stage, step in design.plan.items() if stage not in unnamed}
        post = Runs.LAST_TURN if design.appended else Runs.EVERY_TURN
        plan = Plan(steps, after_inference=post)
        assert plan[Stage.INPUT_SAFETY] == Step(Runs.EVERY_TURN), design.name
        assert plan[Stage.OUTPUT_SAFETY] == Step(post), design.name
        assert list(plan) == list(Stage)  # every stage, in order
        assert {s: plan[s] for s in Stage if s not in unnamed} == steps  # the named ones as named
        assert (Stage.OUTPUT_SAFETY in plan.stages_on(1, last=False)) is not design.appended
        assert Stage.INPUT_SAFETY in plan.stages_on(1, last=False)
    assert Plan({})[Stage.BILLING] == Step(Runs.EVERY_TURN)  # after inference, by default: every turn


def test_transport_follows_the_composed_fields() -> None:
    base, key = "http://127.0.0.1:9/v1", "k"
    assert isinstance(open_transport("naive+render_cache", base, key), StatelessHTTP)
    assert isinstance(open_transport("websocket+no_connection_cache", base, key), StatelessHTTP)
    assert isinstance(open_transport("sprint+connection_cache", base, key), WebSocketMode)
    appended = open_transport("websocket+appended", base, key)
    assert isinstance(appended, AppendedRollout) and appended.design == "websocket+appended"
    with pytest.raises(DesignSpecError, match="'turbo'"):
        open_transport("naive+turbo", base, key)


def test_lab_takes_specs() -> None:
    table = lab.plan_table(["naive", "naive+render_cache"])
    assert table.loc["render", "naive+render_cache"] == "every turn, over the new items (render cache)"
    shape = "synthetic:turns=3"
    named = lab.predict("sprint", profile_name="local", scenario_name=shape, cpu=CpuCosts())
    spelled = lab.predict(SPRINT_PARTS, profile_name="local", scenario_name=shape, cpu=CpuCosts())
    assert spelled.design == SPRINT_PARTS
    assert [t.stages for t in spelled] == [t.stages for t in named]
    assert lab.compose is compose


# ---------------------------------------------------------------- a server


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    """A server whose default design is itself composed (``labkit serve --design SPEC``)."""
    with LabkitServer(args=["--profile", "local", "--design", "naive+no_intermediary"]) as srv:
        yield srv


def test_a_composed_header_switches_on_the_render_cache(server: LabkitServer) -> None:
    first, second = two_http_turns(server.base_url, **{DESIGN_HEADER: "naive+render_cache"})
    assert by_stage(first)["render"]["detail"]["cache"] == "miss"
    assert by_stage(second)["render"]["detail"]["cache"] == "render_cache"
    assert "intermediary" in by_stage(second)  # naive's hop, untouched
    assert by_stage(second)["routing"]["detail"]["config_cache"] is False


def test_naive_alone_renders_everything(server: LabkitServer) -> None:
    _, second = two_http_turns(server.base_url, **{DESIGN_HEADER: "naive"})
    assert by_stage(second)["render"]["detail"]["cache"] == "none"
    assert "intermediary" in by_stage(second)


def test_a_composed_serve_default_applies_without_a_header(server: LabkitServer) -> None:
    _, second = two_http_turns(server.base_url)
    stages = by_stage(second)
    assert "intermediary" not in stages
    assert stages["render"]["detail"]["cache"] == "none"


@pytest.mark.parametrize(
    ("spec", "part"),
    [("naive+turbo", "'turbo'"), ("naive+render_cache+render_cache", "appears twice")],
)
def test_a_bad_composed_header_is_a_400_naming_the_part(server: LabkitServer, spec: str, part: str) -> None:
    reply = httpx.post(
        f"{server.base_url}/responses",
        json={"model": MODEL, "input": "Hi."},
        headers={**auth_headers(), DESIGN_HEADER: spec},
        timeout=30,
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        DESIGN_HEADER,
        "invalid_value",
    )
    assert part in error["message"] and spec in error["message"]


# ---------------------------------------------------------------- the WebSocket upgrade


def ws_connect(server: LabkitServer, query: str = "", **headers: str) -> ClientConnection:
    return connect(server.ws_url + query, additional_headers={**auth_headers(), **headers}, open_timeout=10)


def ws_turn(ws: ClientConnection, **body: Any) -> dict[str, Any]:
    ws.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
    while True:
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] != "error", event
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return event["response"]


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        ("?design=websocket+turbo", {}),
        ("?design=websocket%2Bturbo", {}),
        ("", {DESIGN_HEADER: "websocket+turbo"}),
        ("", {DESIGN_HEADER: "websocket++no_appended"}),
    ],
)
def test_a_bad_composed_design_refuses_the_upgrade(
    server: LabkitServer, query: str, headers: dict[str, str]
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(server, query, **headers)
    # A 400 in the API's error shape, naming the header (docs/protocol.md §3.1).
    assert refused.value.response.status_code == 400
    assert b'"param":"x-labkit-design"' in refused.value.response.body


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        ("?design=websocket+no_overlapped_billing", {}),  # "+" as typed: the query decodes it as a space
        ("?design=websocket%2Bno_overlapped_billing", {}),
        ("", {DESIGN_HEADER: "websocket+no_overlapped_billing"}),
    ],
)
def test_a_composed_design_over_websocket(server: LabkitServer, query: str, headers: dict[str, str]) -> None:
    with ws_connect(server, query, **headers) as ws:
        first = ws_turn(ws, input="Say hello.", store=False)
        second = ws_turn(ws, input="More.", previous_response_id=first["id"], store=False)
    spans = by_stage(server_spans(server.base_url, second["id"]))
    assert spans["hydration"]["detail"]["source"] == "connection_cache"  # still the websocket design
    assert spans["billing"]["detail"]["overlapped"] is False  # but billing blocks


# ---------------------------------------------------------------- whole rollouts


def server_stages(frame: Any, turn: int) -> list[str]:
    rows = frame[(frame["source"] == "server") & (frame["turn"] == turn)]
    return sorted(rows["stage"])


@pytest.mark.parametrize("spec", ["naive+render_cache", "appended+no_overlapped_billing"])
def test_a_rollout_with_a_composed_design_runs_its_plan(server: LabkitServer, spec: str) -> None:
    rollout = Rollout.run(server.base_url, spec, SCENARIO)
    frame = rollout.frame()
    plan, turns = compose(spec).plan, len(rollout.records)
    assert turns == 3 and set(frame["design"]) == {spec}
    for turn in range(turns):
        expected = plan.stages_on(turn, last=turn == turns - 1)
        assert server_stages(frame, turn) == sorted(str(s) for s in expected), (spec, turn)
    render = frame[frame["stage"] == "render"].set_index("turn")["detail"]
    if spec == "naive+render_cache":
        assert [render[t]["cache"] for t in range(1, turns)] == ["render_cache"] * (turns - 1)
    else:  # one response for the whole rollout, split into its segments by the appended check
        assert len(set(frame["response_id"])) == 1 and compose(spec).appended
        billing = frame[frame["stage"] == "billing"]
        assert list(billing["turn"]) == [turns - 1]
        assert billing["detail"].iloc[0]["overlapped"] is False
