"""The what-if lab's replay section: a recording priced by the cost model at once, measured for
real on a button, and a file that cannot be replayed answered in one line in the widget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.analysis import frontend
from labkit.analysis.cost_model import CpuCosts, Shape
from labkit.analysis.replay import REPLAYS, price, replay
from labkit.analysis.replay_ui import MEASURED_AT, OWN, ReplayLab
from labkit.designs import DESIGNS
from labkit.scenarios.replay import load_replay

CPU = CpuCosts()

# The lab's live figures are widgets, as where a front end draws them.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("front_end_draws_widgets")]  # many rollouts


def parallel_calls(path: Path) -> Path:
    """A transcript whose first turn makes two calls at once, then answers."""
    tool = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}
    calls = [{"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": "{}"} for i in (1, 2)]
    outputs = [{"type": "function_call_output", "call_id": f"c{i}", "output": "x " * 200} for i in (1, 2)]
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}
    pairs = [
        {"request": {"input": "Read both.", "tools": [tool]}, "response": {"output": calls}},
        {"request": {"input": outputs, "tools": [tool]}, "response": {"output": [answer]}},
    ]
    path.write_text(json.dumps(pairs))
    return path


def test_price_has_a_row_per_speed_and_design_with_the_recorded_turns() -> None:
    priced = price(REPLAYS / "codex-websocket.jsonl", cpu=CPU, tps=(65, 1000))
    table = priced.table
    assert list(zip(table["tps"], table["design"], strict=True)) == [
        (tps, d) for tps in (65.0, 1000.0) for d in DESIGNS
    ]
    assert (table["turns"] == len(priced.replay.turns)).all()
    by = table.set_index(["tps", "design"])["saved_vs_naive"]
    assert by[(1000.0, "naive")] == 0
    # fast decoding exposes the service: every design saves more at 1,000 tokens/s than at 65
    assert all(by[(1000.0, d)] > by[(65.0, d)] for d in DESIGNS if d != "naive")


def test_price_uses_the_columns_a_measured_replay_has() -> None:
    priced = price(REPLAYS / "transcript-http.json", cpu=CPU, tps=(1000,)).table
    measured = replay(REPLAYS / "transcript-http.json", tps=(1000,), designs=("naive", "websocket")).table
    assert {"design", "tps", "e2e_s", "ttft_mean_s", "saved_vs_naive", "ttft_cut_vs_naive", "turns"} <= set(
        measured.columns
    ) & set(priced.columns)
    assert list(measured["turns"]) == list(priced.set_index("design").loc[["naive", "websocket"], "turns"])


def test_a_recording_with_parallel_calls_is_priced_turn_for_turn(tmp_path: Path) -> None:
    priced = price(parallel_calls(tmp_path / "two-at-once.json"), cpu=CPU, tps=(1000,))
    assert (priced.table["turns"] == len(priced.replay.turns)).all()


def test_shape_of_a_replay_with_parallel_calls_has_the_recorded_turns(tmp_path: Path) -> None:
    recording = load_replay(parallel_calls(tmp_path / "two-at-once.json"), tmp_path / "work")
    first, answer = Shape.of(recording.scenario).turns  # the two calls at once, then the answer
    assert (first.output_items, answer.new_items, answer.output_items) == (2, 2, 1)


# ---------------------------------------------------------------- the widgets


def test_picking_a_recording_prices_it_for_every_design_and_chosen_speed() -> None:
    ui = ReplayLab(cpu=CPU)
    assert ui.recording.value == "codex-http.jsonl" and ui.tps == (65, 1000)
    assert "4 turns" in ui.about.value and ui.status.value == ""
    bars = [t for t in ui.figure.widget.data if t.type == "bar" and t.visible]
    assert [t.name for t in bars] == ["65 tokens/s", "1,000 tokens/s"]
    assert list(bars[0].x) == list(DESIGNS)
    ui.speeds[4000].value = True
    assert len([t for t in ui.figure.widget.data if t.type == "bar" and t.visible]) == 3
    assert ui.table.value.count("<tr>") == 1 + 3 * len(DESIGNS)
    ui.recording.value = "transcript-http.json"
    assert ui.about.value.startswith("transcript-http.json: a transcript")


def test_a_file_that_cannot_be_replayed_is_one_line_in_the_widget(tmp_path: Path) -> None:
    ui = ReplayLab(cpu=CPU)
    ui.recording.value = OWN
    assert not ui.path.disabled and ui.measure_button.disabled
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"timestamp": "t", "type": "session_meta", "payload": {}}\n{"type": broken\n')
    ui.path.value = str(bad)
    assert ui.status.value.startswith("notes.jsonl: line 2: expected a JSON object on each line")
    assert "\n" not in ui.status.value and "Traceback" not in ui.status.value
    assert ui.priced is None and ui.table.value == "" and ui.measure_button.disabled
    assert not [t for t in ui.figure.widget.data if len(t.y or ())]  # nothing priced, nothing drawn
    ui.path.value = str(tmp_path / "missing.jsonl")
    assert ui.status.value.startswith("cannot read") and "No such file" in ui.status.value
    ui.path.value = str(parallel_calls(tmp_path / "two-at-once.json"))
    assert ui.status.value == "" and ui.priced is not None and not ui.measure_button.disabled


def test_the_button_measures_in_the_background_and_puts_diamonds_on_the_bars() -> None:
    states: list[bool] = []

    def measure(source: Path, **options) -> object:
        states.extend(c.disabled for c in (ui.recording, *ui.speeds.values(), ui.measure_button))
        return replay(source, designs=list(DESIGNS), **options)

    ui = ReplayLab(cpu=CPU, measure=measure)
    ui.speeds[65].value = False  # 1,000 tokens/s only: a few seconds
    ui.measure_button.click()
    ui.wait()
    assert states and all(states)
    assert not ui.measure_button.disabled and ui.status.value == MEASURED_AT
    assert ui.progress.value == ui.progress.max == 1 + len(DESIGNS)
    diamonds = [t for t in ui.figure.widget.data if t.type == "scatter" and t.visible]
    assert len(diamonds) == 1 and list(diamonds[0].x) == list(DESIGNS) and diamonds[0].y[0] == 0
    assert ui.comparison.value.count("<tr>") == 1 + len(DESIGNS)
    # the diamonds belong to what was measured: another speed clears them
    ui.speeds[65].value = True
    assert not [t for t in ui.figure.widget.data if t.type == "scatter" and t.visible]
    assert ui.comparison.value == ""


def test_the_figure_is_offered_static_for_headless_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    ui = ReplayLab(cpu=CPU)
    monkeypatch.setattr(frontend, "_answer", True)
    assert ui.static_figures() == []
    monkeypatch.setattr(frontend, "_answer", False)
    [figure] = ui.static_figures()
    drawn = figure._repr_mimebundle_()["application/vnd.plotly.v1+json"]["data"]
    assert [t["name"] for t in drawn if t["visible"]] == ["65 tokens/s", "1,000 tokens/s"]
