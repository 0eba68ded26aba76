"""The what-if lab's knobs beyond the service's delays: output per turn, the baseline, the saving
mechanism by mechanism, a slower CPU and reconnects. Each moves the prediction through the
mechanism it names, and the widgets follow."""

from __future__ import annotations

import re
from dataclasses import fields, replace

import pytest

from labkit.analysis import frontend, whatif
from labkit.analysis.cost_model import predict
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.whatif_ui import WhatIfLab
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.designs import compose
from labkit.engine.catalogue import load_catalogue
from labkit.paths import builtin_data_dir
from labkit.profiles import DEFAULT_PROFILE, load_profile

CPU = CpuCosts()
POINT = whatif.Settings(turns=6, tool_tokens=400, instruction_tokens=1000)

# The lab's live figures are widgets, as where a front end draws them.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("front_end_draws_widgets")]  # many rollouts


def stage_seconds(settings: whatif.Settings, design: str, stage: str, cpu: CpuCosts = CPU) -> float:
    table = whatif.breakdown(settings, design, cpu).set_index("stage")["seconds"]
    return float(table.get(stage, 0.0))


def websocket_saving(settings: whatif.Settings) -> float:
    return float(whatif.predict(settings, CPU).set_index("design").loc["websocket", "saved_vs_naive"])


def e2e(settings: whatif.Settings, cpu: CpuCosts = CPU) -> dict[str, float]:
    return whatif.predict(settings, cpu).set_index("design")["e2e_s"].to_dict()


# ---------------------------------------------------------------- defaults from one source


def test_defaults_are_the_profile_and_the_catalogue() -> None:
    profile = load_profile(DEFAULT_PROFILE, builtin_data_dir())
    spark = load_catalogue().resolve("labkit-spark")
    default = whatif.Settings()
    assert (default.rtt_ms, default.auth_ms, default.billing_ms) == (
        profile.network.rtt_ms,
        profile.auth.hop_ms,
        profile.billing.hop_ms,
    )
    assert (default.decode_tps, default.prefill_tps) == (spark.decode_tps, spark.prefill_tps)
    assert whatif.PRESETS["fast coding model (1,000 tokens/s)"] == default


# ---------------------------------------------------------------- output per turn


def test_more_output_per_turn_is_more_decode_time_in_proportion() -> None:
    short, long = replace(POINT, output_tokens=60), replace(POINT, output_tokens=600)
    for point in (short, long):
        sampled = sum(t.output_tokens for t in point.shape().turns)
        assert stage_seconds(point, "websocket", "decode") == pytest.approx(sampled / point.decode_tps)
    assert stage_seconds(long, "websocket", "decode") / stage_seconds(short, "websocket", "decode") == (
        pytest.approx(10, rel=0.05)
    )
    # the service's seconds barely move, so the same saving is a smaller share of a longer rollout
    assert websocket_saving(long) < websocket_saving(short)
    assert "output_tokens=600" in long.scenario_name  # what a measurement runs


# ---------------------------------------------------------------- the baseline


def test_a_saving_against_the_sprint_is_smaller_than_against_naive() -> None:
    table = whatif.predict(POINT, CPU).set_index("design")
    ws = table.loc["websocket"]
    assert 0 < ws["saved_vs_sprint"] < ws["saved_vs_naive"]
    assert ws["saved_vs_sprint"] == pytest.approx(1 - ws["e2e_s"] / table.loc["sprint", "e2e_s"])
    assert table.loc["sprint", "saved_vs_sprint"] == 0
    sprint_curve = whatif.saving_by_speed(POINT, CPU, speeds=[100, 1000], baseline="sprint")
    naive_curve = whatif.saving_by_speed(POINT, CPU, speeds=[100, 1000], baseline="naive")
    assert (sprint_curve["saving"] < naive_curve["saving"]).all()
    with pytest.raises(ValueError, match="against one of"):
        whatif.saving_column("websocket")


# ---------------------------------------------------------------- mechanism by mechanism


def test_each_step_switches_on_exactly_the_mechanism_it_names() -> None:
    expected = {
        "cached rendered tokens + model config": {"render_cache", "model_config_cache"},
        "no intermediary hop": {"intermediary_hop"},
        "fast classifiers": {"fast_classifiers"},
        "connection cache": {"connection_cache"},
        "overlapped billing": {"overlapped_billing"},
    }
    before = compose("naive")
    for mechanism in whatif.MECHANISMS:
        after = compose(mechanism.design)
        switches = [f.name for f in fields(after) if f.name != "name"]
        changed = {name for name in switches if getattr(after, name) != getattr(before, name)}
        assert changed == expected[mechanism.label]
        before = after


def test_the_bars_add_up_to_the_saving_and_each_is_its_mechanism() -> None:
    table = whatif.predict(POINT, CPU).set_index("design")
    naive = whatif.mechanism_savings(POINT, CPU, "naive").set_index("mechanism")
    assert naive["saving"].sum() == pytest.approx(table.loc["websocket", "saved_vs_naive"])
    assert naive.loc[naive["part_of"] == "sprint", "saving"].sum() == pytest.approx(
        table.loc["sprint", "saved_vs_naive"]
    )
    # dropping the intermediary saves its hop on every turn; overlapping billing, the billing hop
    hop = lambda ms: POINT.turns * (ms / 1000 + CPU.timer_overrun_s)  # noqa: E731
    assert naive.loc["no intermediary hop", "saved_s"] == pytest.approx(hop(POINT.intermediary_ms))
    assert naive.loc["overlapped billing", "saved_s"] == pytest.approx(hop(POINT.billing_ms))
    sprint = whatif.mechanism_savings(POINT, CPU, "sprint").set_index("mechanism")
    assert list(sprint.index) == ["connection cache", "overlapped billing"]
    assert sprint["saving"].sum() == pytest.approx(table.loc["websocket", "saved_vs_sprint"])
    assert (sprint["saved_s"] == naive.loc[sprint.index, "saved_s"]).all()  # the same seconds...
    assert (sprint["saving"] > naive.loc[sprint.index, "saving"]).all()  # ...of a shorter rollout


# ---------------------------------------------------------------- a slower CPU


def test_cpu_costs_scale_except_the_timer() -> None:
    slow = CPU.scaled(2)
    for f in fields(CpuCosts):
        factor = 1 if f.name == "timer_overrun_s" else 2
        assert getattr(slow, f.name) == pytest.approx(factor * getattr(CPU, f.name))
    with pytest.raises(ValueError):
        CPU.scaled(0)


def test_a_cpu_twice_as_slow_doubles_the_cpu_stages_and_nothing_else() -> None:
    slow = replace(POINT, cpu_factor=2)
    for stage in ("render", "validation", "build"):  # pure CPU work: the server's and the client's
        assert stage_seconds(slow, "naive", stage) == pytest.approx(2 * stage_seconds(POINT, "naive", stage))
    for stage in ("intermediary", "auth", "prefill", "decode"):  # modeled hops and the GPU
        assert stage_seconds(slow, "naive", stage) == pytest.approx(stage_seconds(POINT, "naive", stage))
    # naive redoes the CPU work over the whole history, so a slow CPU widens the gap in seconds
    gap = {p: e2e(p)["naive"] - e2e(p)["websocket"] for p in (POINT, slow)}
    assert gap[slow] > gap[POINT]


# ---------------------------------------------------------------- reconnects


def test_reconnect_turns_are_the_rate_spread_over_the_turns_after_the_first() -> None:
    assert whatif.reconnect_turns(11, 0.3) == {4, 7, 10}
    assert len(whatif.reconnect_turns(19, 0.25)) == 4
    with pytest.raises(ValueError):
        whatif.reconnect_turns(5, 1.5)


def test_reconnects_touch_only_websocket_mode_and_cost_more_the_more_there_are() -> None:
    rates = [0, 0.25, 0.5, 1.0]
    runs = [e2e(replace(POINT, reconnect_rate=r)) for r in rates]
    for design in ("naive", "sprint", "appended"):
        assert [run[design] for run in runs] == pytest.approx([runs[0][design]] * len(rates))
    ws = [run["websocket"] for run in runs]
    assert ws == sorted(ws) and ws[0] < ws[-1]


def test_a_missed_connection_cache_prices_the_turn_as_the_sprint_plus_a_new_socket() -> None:
    profile, shape, turns = POINT.profile(), POINT.shape(), POINT.turns
    every = whatif.reconnect_turns(turns, 1.0)
    speeds = {"decode_tps": POINT.decode_tps, "prefill_tps": POINT.prefill_tps, "cpu": CPU}
    ws = predict("websocket", profile, shape, reconnects=every, **speeds)
    sprint = predict("sprint", profile, shape, **speeds)
    hit = predict("websocket", profile, shape, **speeds)
    for stage in ("input_safety", "render"):  # the whole history scanned again; the render cache holds it
        assert [t.tokens[stage] for t in ws] == [t.tokens[stage] for t in sprint]
    assert all(ws[t].build > hit[t].build for t in every)  # the client sends the whole history
    # what is left: a new socket each time (handshakes, upgrade), the event's framing, overlapped billing
    net, late = profile.network, CPU.timer_overrun_s
    socket = len(every) * (net.handshake_s() + late) + (len(every) + 1) * (net.rtt_ms / 1000 + late)
    billing = turns * (profile.billing.hop_ms / 1000 + late)
    framing = turns * (CPU.ws_request_s - CPU.http_request_s)
    assert ws.end_to_end - sprint.end_to_end == pytest.approx(socket - billing + framing)


# ---------------------------------------------------------------- tables with units


def test_tables_carry_units_and_round_their_numbers() -> None:
    from labkit.analysis.tables import styled

    predicted = whatif.predict(POINT, CPU)
    table = whatif.prediction_table(predicted, "sprint")
    assert {"end to end (s)", "saved vs sprint", "mean TTFT (ms)", "API service (s)"} <= set(table.columns)
    mechanisms = whatif.mechanism_table(whatif.mechanism_savings(POINT, CPU, "naive"), "naive")
    assert list(mechanisms.columns) == ["part of", "saved (s)", "saved vs naive"]
    for shown in (table, mechanisms):
        html = styled(shown).to_html()
        assert not re.search(r"\d\.\d{4,}", html), "no long floats"


# ---------------------------------------------------------------- the widgets


def test_the_new_controls_redraw_the_lab() -> None:
    lab_ui = WhatIfLab(settings=POINT, cpu=CPU)
    bars = lambda: list(lab_ui.predictions.widget.data[0].y)  # noqa: E731
    before = bars()
    lab_ui.controls["output_tokens"].value = 600
    assert all(a > b for a, b in zip(bars(), before, strict=True))
    assert lab_ui.settings.output_tokens == 600
    lab_ui.baseline.value = "sprint"
    assert "sprint" in lab_ui.curve.widget.layout.yaxis.title.text
    title = lab_ui.curve.widget.layout.title.text
    assert "sprint" in title and "grows" not in title  # names the baseline, not an outcome
    assert [list(trace.x) for trace in lab_ui.mechanisms.widget.data] == [
        ["connection cache", "overlapped billing"]
    ]
    assert "saved vs sprint" in lab_ui.table.value
    lab_ui.baseline.value = "naive"
    assert sum(len(trace.x) for trace in lab_ui.mechanisms.widget.data) == len(whatif.MECHANISMS)


def test_model_only_controls_are_priced_but_not_measured() -> None:
    lab_ui = WhatIfLab(settings=POINT, cpu=CPU)
    assert not lab_ui.measure_button.disabled
    naive_api = lambda: float(lab_ui.predicted.set_index("design").loc["naive", "api_s"])  # noqa: E731
    before = naive_api()
    lab_ui.controls["cpu_factor"].value = 3
    assert naive_api() > before
    assert lab_ui.measure_button.disabled and "model" in lab_ui.status.value
    lab_ui.controls["cpu_factor"].value = 1
    assert not lab_ui.measure_button.disabled and lab_ui.status.value == ""
    lab_ui.controls["reconnect_rate"].value = 0.5  # realised by the client: still measurable
    assert not lab_ui.measure_button.disabled
    with pytest.raises(ValueError, match="cpu_factor"):
        whatif.measure(replace(POINT, cpu_factor=2))


def test_a_reconnect_is_real_a_new_socket_and_the_whole_history(server: LabkitServer) -> None:
    """On a reconnect turn the client opens a new socket: the server pays the connection and the
    upgrade again, and its classifier reads the whole history, as over HTTP."""
    scenario = "synthetic:turns=5,output_tokens=20,tool_tokens=400,instruction_tokens=200"
    rollout = Rollout.run(server.base_url, "websocket", scenario, reconnects={3})
    frame = rollout.frame()
    upgrades = sorted(frame.loc[frame["stage"] == "upgrade", "turn"])
    assert upgrades == [0, 3]
    scanned = frame[frame["stage"] == "input_safety"].groupby("turn")["tokens"].sum()
    assert scanned[3] > 3 * scanned[2] and scanned[4] < scanned[3] / 3  # the whole history, once
    kept = Rollout.run(server.base_url, "websocket", scenario)
    assert sorted(kept.frame().query("stage == 'upgrade'")["turn"]) == [0]


def test_the_preset_follows_the_settings_back() -> None:
    name = "bursts (4,000 tokens/s)"
    lab_ui = WhatIfLab(settings=whatif.PRESETS[name], cpu=CPU)
    assert lab_ui.preset.value == name
    lab_ui.controls["turns"].value = 8
    assert lab_ui.preset.value == "(your settings)"
    lab_ui.controls["turns"].value = whatif.PRESETS[name].turns  # a notebook puts it back
    assert lab_ui.preset.value == name


def test_the_lab_offers_its_figures_static_for_headless_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    lab_ui = WhatIfLab(settings=POINT, cpu=CPU)
    monkeypatch.setattr(frontend, "_answer", True)  # a front end draws the widgets: nothing static
    assert lab_ui.static_figures() == []
    monkeypatch.setattr(frontend, "_answer", False)  # a headless runner, learnt by the probe
    figures = lab_ui.static_figures()
    assert len(figures) == 4
    plots = (lab_ui.predictions, lab_ui.mechanisms, lab_ui.curve, lab_ui.breakdown)
    for figure, plot in zip(figures, plots, strict=True):
        bundle = figure._repr_mimebundle_()
        assert len(bundle["application/vnd.plotly.v1+json"]["data"]) == len(plot.figure.data) > 0
