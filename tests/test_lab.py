"""The notebook API (``labkit.lab``): one import, documented names, frames that keep what spans know."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from labkit import lab
from labkit.analysis.cpu_costs import CpuCosts
from labkit.api.stages import Stage
from labkit.designs import DESIGNS

pytestmark = pytest.mark.slow  # a fresh interpreter per check

SCENARIO = "synthetic:turns=5,output_tokens=20,tool_tokens=300,instruction_tokens=200"


def test_the_client_side_loads_no_server_module() -> None:
    """A client (the agent, its transports and tools) needs none of the server: no uvicorn, no SQLite."""
    code = (
        "import sys, json, labkit.client.agent, labkit.client.transports, labkit.client.tools;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('labkit.server', 'uvicorn', "
        "'sqlite3', 'starlette')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_the_labs_widgets_without_the_front_end_say_which_install_has_them() -> None:
    """A base install (``pip install .``) has no ipywidgets: the what-if lab says so in one sentence."""
    code = (
        "import sys; sys.modules['ipywidgets'] = None\n"
        "from labkit import lab\n"
        "for make in (lab.what_if_lab, lab.replay_lab):\n"
        "    try: make()\n"
        "    except ModuleNotFoundError as err: print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["WhatIfLab", "ReplayLab"]
    assert all('pip install -e ".[notebooks]"' in line and "ipywidgets" in line for line in lines)


def test_every_public_name_is_documented_with_an_example() -> None:
    for name in lab.__all__:
        obj = getattr(lab, name)
        if isinstance(obj, dict | tuple):  # DESIGNS, HISTORY_STAGES: data, described in the module docstring
            assert name in lab.__doc__
            continue
        doc = obj.__doc__ or ""
        # a doctest, or a code block indented beyond the docstring's own text
        example = ">>>" in doc or any(line.startswith(" " * 8) and line.strip() for line in doc.splitlines())
        assert doc and example, f"lab.{name} needs a docstring with a short example"


def test_plan_table_has_every_stage_and_design() -> None:
    table = lab.plan_table()
    assert list(table.index) == [str(s) for s in Stage]
    assert list(table.columns) == list(DESIGNS)
    assert table.loc["intermediary", "sprint"] == "skipped"
    assert table.loc["render", "naive"] == "every turn, over the whole history"


@pytest.fixture(scope="module")
def server() -> Iterator[lab.LabkitServer]:
    with lab.LabkitServer(args=["--profile", "local"]) as srv:
        yield srv


def test_play_yields_each_turn_as_it_completes_then_fetches_the_spans(server: lab.LabkitServer) -> None:
    rollout = lab.Rollout("websocket")
    seen = []
    for record in rollout.play(server.base_url, SCENARIO):
        seen.append(record.turn)
        assert rollout.records[-1] is record
        assert rollout.spans == {}  # fetched after the last turn, so fetching never slows a turn
    assert seen == [0, 1, 2, 3, 4]
    assert set(rollout.spans) == {r.response_id for r in rollout.records}


def test_the_frame_keeps_what_the_spans_know(server: lab.LabkitServer) -> None:
    frames = {d: lab.Rollout.run(server.base_url, d, SCENARIO).frame() for d in ("naive", "websocket")}
    naive, ws = (lab.stage_work(frames[d], ["input_safety", "render"]) for d in ("naive", "websocket"))
    # naive scans the whole history every turn, so its work grows; websocket's stays that of one tool output
    assert naive["input_safety"].is_monotonic_increasing and naive["input_safety"].iloc[-1] > 3 * 300
    assert ws["input_safety"].iloc[1:].between(300, 400).all()
    assert ws["render"].iloc[1:].between(300, 400).all()
    assert lab.span_detail(frames["naive"], "render", "cache").eq("none").all()
    assert lab.span_detail(frames["websocket"], "render", "cache").iloc[1:].eq("connection_cache").all()
    assert lab.span_detail(frames["websocket"], "hydration", "source").iloc[1:].eq("connection_cache").all()
    replicas = lab.span_detail(frames["websocket"], "routing", "replica").dropna()
    assert replicas.nunique() == 1
    items = lab.stage_work(frames["naive"], ["validation"], column="items")["validation"]
    # the whole history: the user message, then a call and its output every turn
    assert items.tolist() == [1, 3, 5, 7, 9]
    assert lab.summary(frames["websocket"])["turns"] == 5
    assert len(lab.turn_table(frames["naive"])) == 5


def test_predict_from_names() -> None:
    naive = lab.predict("naive", profile_name="local", scenario_name=SCENARIO, cpu=CpuCosts())
    ws = lab.predict("websocket", profile_name="local", scenario_name=SCENARIO, cpu=CpuCosts())
    assert len(naive) == len(ws) == 5
    assert naive[4].tokens[Stage.INPUT_SAFETY] > ws[4].tokens[Stage.INPUT_SAFETY]
    frame = ws.frame()
    assert set(frame["stage"]) >= {"uplink", "render", "decode", "build", "tool"}


def test_watching_a_rollout_is_left_out_of_its_metrics(server: lab.LabkitServer) -> None:
    """Time a notebook spends between turns (fetching spans, drawing) is not the agent's."""
    rollout = lab.Rollout("websocket")
    for record in rollout.play(server.base_url, SCENARIO, watch=True):
        # the spans of the turn just finished are there already, so it can be drawn now
        assert record.response_id in rollout.spans
        time.sleep(0.05)
    frame = rollout.frame()
    observed = frame[frame["stage"] == "observe"].set_index("turn")["duration"]
    assert len(observed) == 5 and (observed >= 0.05).all()
    assert set(frame.loc[frame["stage"] == "observe", "bucket"]) == {"observer"}
    sends = frame[frame["stage"] == "send"].set_index("turn")["start"]
    table = lab.turn_table(frame)
    for turn in range(4):
        assert table.loc[turn, "wall"] == pytest.approx(sends[turn + 1] - sends[turn] - observed[turn])
    done = frame.loc[frame["stage"] == "done", "start"].max()
    # the last turn's watch comes after the rollout's last answer: it takes nothing from end to end
    last_watch = frame.loc[(frame["stage"] == "observe") & (frame["turn"] == 4), "start"].item()
    assert last_watch >= done
    assert table.loc[4, "wall"] == pytest.approx(done - sends[4])  # nothing watched taken from it
    assert lab.end_to_end(frame) == pytest.approx(done - sends[0] - observed[:4].sum())
