"""The what-if lab: pure functions (settings in, DataFrames out) and the widgets over them,
driven in code as a learner would drive them with the mouse."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from labkit.analysis import whatif
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.whatif_ui import CUSTOM, WhatIfLab
from labkit.profiles import load_profile, profile_toml

CPU = CpuCosts()
SMALL = whatif.Settings(turns=3, tool_tokens=150, instruction_tokens=300, rtt_ms=4, auth_ms=1, billing_ms=1)

# The lab's live figures are widgets, as where a front end draws them.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("front_end_draws_widgets")]  # many rollouts


def test_presets_are_the_articles_speeds() -> None:
    assert sorted(p.decode_tps for p in whatif.PRESETS.values()) == [65, 1000, 4000]


def test_settings_become_a_profile_the_server_loads(tmp_path: Path) -> None:
    point = replace(SMALL, rtt_ms=33, intermediary_ms=7, classifier_ms_per_1k=2.5)
    path = tmp_path / "what-if.toml"
    path.write_text(profile_toml(point.profile()))
    loaded = load_profile(str(path), tmp_path)
    assert loaded.network.rtt_ms == 33 and loaded.intermediary.hop_ms == 7
    assert loaded.safety.ms_per_1k_tokens == 2.5
    assert loaded.engine == point.profile().engine


def test_tool_time_is_spent_on_every_turn_that_calls_a_tool() -> None:
    shape = replace(SMALL, tool_ms=120).shape()
    assert [t.tool_s for t in shape.turns] == [0.12, 0.12, 0.0]


def test_predictions_follow_the_settings() -> None:
    fast = whatif.predict(replace(SMALL, decode_tps=4000), CPU).set_index("design")
    slow = whatif.predict(replace(SMALL, decode_tps=65), CPU).set_index("design")
    assert (fast["e2e_s"] < slow["e2e_s"]).all()
    # the socket's share of savings grows when decoding stops hiding the service
    assert fast.loc["websocket", "saved_vs_naive"] > slow.loc["websocket", "saved_vs_naive"]
    hops = whatif.predict(replace(SMALL, intermediary_ms=30), CPU).set_index("design")
    base = whatif.predict(SMALL, CPU).set_index("design")
    assert hops.loc["naive", "e2e_s"] > base.loc["naive", "e2e_s"]
    assert hops.loc["websocket", "e2e_s"] == pytest.approx(base.loc["websocket", "e2e_s"])  # no such hop


def test_the_breakdown_names_the_stages_of_the_plan() -> None:
    naive = whatif.breakdown(SMALL, "naive", CPU)
    sprint = whatif.breakdown(SMALL, "sprint", CPU)
    assert "intermediary" in set(naive["stage"]) and "intermediary" not in set(sprint["stage"])
    assert set(naive["bucket"]) == {"api", "inference", "client"}


def test_the_saving_curve_rises_with_speed_and_crosses_a_threshold_once() -> None:
    curve = whatif.saving_by_speed(whatif.PRESETS["fast coding model (1,000 tokens/s)"], CPU)
    assert curve["saving"].is_monotonic_increasing
    speed = whatif.speed_where_saving_falls_below(curve, 0.15)
    assert speed is not None and curve["decode_tps"].min() < speed < curve["decode_tps"].max()
    assert whatif.speed_where_saving_falls_below(curve, 0.99) is None


def test_measuring_a_point_runs_every_design_for_real() -> None:
    seen: list[str] = []
    measured = whatif.measure(SMALL, progress=lambda done, total, what: seen.append(what))
    assert list(measured["design"]) == ["naive", "sprint", "websocket", "appended"]
    assert (measured["e2e_s"] > 0).all() and (measured["ttft_mean_s"] > 0).all()
    assert seen[0].startswith("starting") and seen[-1] == "done"
    both = whatif.against(whatif.predict(SMALL, CPU), measured)
    assert list(both.columns)[:4] == ["design", "e2e_s_predicted", "e2e_s_measured", "e2e_s_error"]


# ---------------------------------------------------------------- the widgets


def bar_heights(lab_ui: WhatIfLab) -> list[float]:
    return list(lab_ui.predictions.widget.data[0].y)


def test_moving_a_control_redraws_every_figure() -> None:
    lab_ui = WhatIfLab(settings=SMALL, cpu=CPU)
    before = bar_heights(lab_ui)
    lab_ui.controls["decode_tps"].value = 4000
    assert bar_heights(lab_ui) != before and max(bar_heights(lab_ui)) < max(before)
    marker = lab_ui.curve.widget.data[1]
    assert list(marker.x) == [pytest.approx(4000, rel=0.01)]
    assert lab_ui.preset.value == CUSTOM
    lab_ui.design.value = "naive"
    assert "naive" in lab_ui.breakdown.widget.layout.title.text
    assert "intermediary" in set(lab_ui.breakdown.widget.data[0].y)
    lab_ui.preset.value = "GPT-5-era model (65 tokens/s)"
    assert lab_ui.controls["decode_tps"].value == pytest.approx(65, rel=0.01)
    assert lab_ui.settings == whatif.PRESETS["GPT-5-era model (65 tokens/s)"]


def test_the_button_measures_in_the_background_and_overlays_the_result() -> None:
    states: list[bool] = []

    def measure(settings: whatif.Settings, progress: Any) -> pd.DataFrame:
        # while it runs, every control is disabled
        states.extend(control.disabled for control in lab_ui.controls.values())
        return whatif.measure(settings, progress=progress)

    lab_ui = WhatIfLab(settings=SMALL, cpu=CPU, measure=measure)
    assert list(lab_ui.predictions.widget.data[1].y) == []  # nothing measured yet
    lab_ui.measure_button.click()
    lab_ui.wait()
    assert states and all(states)
    assert not any(control.disabled for control in lab_ui.controls.values())
    overlay = lab_ui.predictions.widget.data[1]
    assert list(overlay.x) == ["naive", "sprint", "websocket", "appended"] and all(v > 0 for v in overlay.y)
    assert lab_ui.comparison.value.count("<tr>") == 5  # a header and one row per design
    assert lab_ui.progress.value == lab_ui.progress.max
    # the overlay belongs to the point it measured: moving on clears it
    lab_ui.controls["turns"].value = 5
    assert list(lab_ui.predictions.widget.data[1].y) == [] and lab_ui.comparison.value == ""


def test_a_paused_lab_predicts_each_change_and_redraws_once_if_the_settings_moved() -> None:
    lab_ui = WhatIfLab(settings=SMALL, cpu=CPU)
    drawn = lab_ui.predictions.updates
    output = lab_ui.controls["output_tokens"]
    before = lab_ui.predicted.set_index("design").loc["websocket", "e2e_s"]
    with lab_ui.paused():
        output.value = output.value * 10
        longer = lab_ui.predicted.set_index("design").loc["websocket", "e2e_s"]
        output.value = output.value // 10
    assert longer > before  # the prediction followed the change...
    assert lab_ui.predictions.updates == drawn  # ...the figures did not, and the lab came back
    with lab_ui.paused():
        output.value = output.value * 2
    assert lab_ui.predictions.updates == drawn + 1  # a change that stays is drawn, once
