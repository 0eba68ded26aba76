"""The standard figures and the live-plot helper, checked without a browser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from labkit.analysis import frontend, live, plots
from labkit.analysis.growth import HISTORY_STAGES
from labkit.analysis.metrics import turns
from labkit.api.stages import DEFINITIONS
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer

SCENARIO = "synthetic:turns=4,output_tokens=20,tool_tokens=300,instruction_tokens=200"


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def frames(server: LabkitServer) -> dict[str, pd.DataFrame]:
    return {d: Rollout.run(server.base_url, d, SCENARIO).frame() for d in ("naive", "websocket")}


class Handle:
    """Stands in for IPython's display handle: remembers what the output became."""

    def __init__(self, shown: Any) -> None:
        self.shown = [shown]

    def update(self, obj: Any) -> None:
        self.shown.append(obj)


@pytest.fixture
def displayed(monkeypatch: pytest.MonkeyPatch) -> list[Handle]:
    handles: list[Handle] = []

    def display(obj: Any, display_id: bool = False, raw: bool = False) -> Handle:
        handles.append(Handle(obj))
        return handles[-1]

    monkeypatch.setattr("IPython.display.display", display)
    return handles


def messages(widget: Any) -> list[str]:
    """Wrap a FigureWidget's senders, so the test sees each message it sends to the browser."""
    sent: list[str] = []
    for name in ("_send_update_msg", "_send_restyle_msg", "_send_relayout_msg", "_send_addTraces_msg"):
        original = getattr(widget, name)

        def record(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            sent.append(_name)
            return _original(*args, **kwargs)

        setattr(widget, name, record)
    return sent


def test_live_plot_sends_one_batch_per_turn_and_leaves_the_same_data_static(
    server: LabkitServer, displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frontend, "_answer", True)  # a front end that draws widgets (it never does here)
    plot = live.LivePlot(plots.turn_buckets).show(None)  # shown before the rollout starts
    assert displayed[0].shown[0] is plot.widget
    sent = messages(plot.widget)
    rollout = Rollout("websocket")
    for n, _record in enumerate(rollout.play(server.base_url, SCENARIO, watch=True), start=1):
        plot.update(rollout.frame())
        assert plot.updates == n
        assert len(sent) == n, sent  # one message to the browser per turn
        # the widget holds exactly what the pure function drew from the turns so far
        api = [round(v, 9) for v in plot.widget.data[0].y]
        assert api == [round(v, 9) for v in turns(rollout.frame())["api"] * 1000][:n]
    final = plot.finish()  # no front end drew it here: a static figure takes the widget's place
    left = displayed[0].shown[-1]
    assert isinstance(left, live.StaticFigure) and left is not plot.widget
    bundle = left._repr_mimebundle_()
    # the static figure carries the final data, in both forms
    drawn = bundle[live.PLOTLY_MIME]["data"]
    assert [_rounded(t["y"]) for t in drawn] == [_rounded(t.y) for t in final.data]
    assert [_rounded(t["y"]) for t in _html_spec(bundle["text/html"])["data"]] == [
        _rounded(t.y) for t in final.data
    ]


def _rounded(values: Any) -> list[float]:
    return [round(v, 6) for v in values]


def _html_spec(html: str) -> dict:
    """The figure as the static HTML's script holds it (``var spec = {...}``)."""
    start = html.rindex("var spec = ") + len("var spec = ")
    return json.JSONDecoder().raw_decode(html[start:])[0]


async def _shown(plot: live.LivePlot, timeout: float) -> bool:
    return await plot.shown(timeout=timeout)


def test_a_drawn_widget_stays_live(displayed: list[Handle], monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a browser reports the widget drawn, ``shown`` returns and ``finish`` keeps the widget."""
    import asyncio

    monkeypatch.setattr(frontend, "_answer", True)  # a front end that draws widgets
    plot = live.LivePlot(plots.turn_buckets).show(None)
    assert asyncio.run(_shown(plot, timeout=0.3)) is False  # nobody drew it yet
    plot.widget._js2py_traceDeltas = {"trace_deltas": [], "trace_edit_id": 0}  # what the browser sends
    assert asyncio.run(_shown(plot, timeout=5)) is True
    plot.finish()
    assert displayed[0].shown == [plot.widget]


def test_a_view_drawn_after_updates_is_brought_up_to_date(
    displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh page draws the widget seconds late: the updates sent before never reach that view,
    so the widget is rebuilt from the latest drawing and takes the output's place."""
    monkeypatch.setattr(frontend, "_answer", True)
    plot = live.LivePlot(plots.race).show({"naive": None})
    first = plot.widget
    plot.update({"naive": None, "websocket": None})  # sent before any view existed
    plot.update({"naive": None, "websocket": None, "sprint": None})
    first._js2py_traceDeltas = {"trace_deltas": [], "trace_edit_id": 0}  # the late view reports in
    assert plot.drawn and plot.replaced and plot.widget is not first
    assert displayed[0].shown[-1] is plot.widget
    assert [t.name for t in plot.widget.data] == [t.name for t in plot.figure.data]
    plot.widget._js2py_traceDeltas = {"trace_deltas": [], "trace_edit_id": 1}  # the new view: no rebuild
    assert displayed[0].shown[-1] is plot.widget and len(displayed[0].shown) == 2


def test_a_view_drawn_before_any_update_is_kept(
    displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frontend, "_answer", True)
    plot = live.LivePlot(plots.race).show({"naive": None})
    plot.widget._js2py_traceDeltas = {"trace_deltas": [], "trace_edit_id": 0}
    plot.update({"naive": None, "websocket": None})
    assert plot.drawn and not plot.replaced and displayed[0].shown == [plot.widget]


def test_where_nothing_draws_widgets_shown_returns_at_once(
    displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.setattr(frontend, "_answer", False)  # a headless runner, learnt by the probe
    plot = live.LivePlot(plots.turn_buckets).show(None)
    assert asyncio.run(_shown(plot, timeout=60)) is False  # no wait for a browser that never comes


def test_where_nothing_draws_widgets_no_widget_is_made(
    server: LabkitServer, displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A headless kernel that already knows: the output waits for the static figure, and the
    executed notebook carries no widget (plotly's widget brings megabytes of script)."""
    monkeypatch.setattr(frontend, "_answer", False)
    plot = live.LivePlot(plots.turn_buckets).show(None)
    assert plot.widget is None and not isinstance(displayed[0].shown[0], live.StaticFigure)
    rollout = Rollout("naive")
    for _record in rollout.play(server.base_url, SCENARIO, watch=True):
        plot.update(rollout.frame())
    final = plot.finish()
    left = displayed[0].shown[-1]
    assert isinstance(left, live.StaticFigure) and plot.updates == 0  # nothing sent meanwhile
    assert [_rounded(t["y"]) for t in left._repr_mimebundle_()[live.PLOTLY_MIME]["data"]] == [
        _rounded(t.y) for t in final.data
    ]
    assert len(final.data[0].y) == 4  # every turn of the rollout


def test_until_the_kernel_knows_a_front_end_draws_widgets_no_widget_is_made(
    displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shown before the probe answers (a notebook's first live plot): a line of text holds the
    place, the updates only redraw the figure, and a headless run never makes a widget: its state
    would carry plotly's whole bundle into the executed notebook."""
    import asyncio

    monkeypatch.setattr(frontend, "_answer", None)
    plot = live.LivePlot(plots.race).show({"naive": None})
    assert plot.widget is None and displayed[0].shown == [{"text/plain": live.PENDING}]
    plot.update({"naive": None, "websocket": None})
    monkeypatch.setattr(frontend, "_answer", False)  # what the probe learns in a headless run
    assert asyncio.run(_shown(plot, timeout=60)) is False and plot.widget is None
    plot.finish()
    assert isinstance(displayed[0].shown[-1], live.StaticFigure) and plot.widget is None


def test_once_a_front_end_is_known_to_draw_widgets_the_live_widget_takes_the_place(
    displayed: list[Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    monkeypatch.setattr(frontend, "_answer", None)
    plot = live.LivePlot(plots.race).show({"naive": None})
    plot.update({"naive": None, "websocket": None})  # before the answer: drawn, not sent
    monkeypatch.setattr(frontend, "_answer", True)  # the probe's answer in JupyterLab
    assert asyncio.run(_shown(plot, timeout=0.2)) is False  # made and displayed, not drawn yet
    assert displayed[0].shown[-1] is plot.widget and plot.updates == 0
    assert [t.name for t in plot.widget.data] == [t.name for t in plot.figure.data]  # the latest drawing


def test_a_figure_in_a_layout_gets_its_widget_only_where_something_draws_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``build`` (a figure in a lab's layout) gives a box: empty until a front end is known to
    draw widgets, then holding the live widget; a box built once that is known holds it at once."""
    monkeypatch.setattr(frontend, "_answer", None)
    plot = live.LivePlot(plots.race)
    box = plot.build({"naive": None})
    assert box.children == () and plot.widget is None
    plot.update({"naive": None, "websocket": None})
    monkeypatch.setattr(frontend, "_answer", True)
    widget = plot.go_live()
    assert box.children == (widget,) and len(widget.data) == len(plot.figure.data)
    assert plot.go_live() is widget  # once only
    assert live.LivePlot(plots.race).build({"naive": None}).children != ()
    monkeypatch.setattr(frontend, "_answer", False)  # a headless run: no widget ever
    headless = live.LivePlot(plots.race)
    assert headless.build({"naive": None}).children == () and headless.widget is None


def test_static_figures_embed_plotly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "_plotlyjs_embedded", False)
    fig = plots.design_bars(pd.DataFrame({"design": ["naive"], "e2e_s": [1.0], "ttft_mean_s": [0.1]}))
    first, second = live.static(fig).data, live.static(fig).data
    assert len(first) > 1_000_000 > len(second)  # plotly.js itself, then only the figure
    assert "https://cdn" not in first[:5000]


def test_static_figures_need_no_script_where_plotly_is_a_mime_type() -> None:
    """JupyterLab, Notebook 7 and VS Code draw plotly's own output type with their bundled
    plotly.js: every static figure carries it, so none depends on another output's script."""
    fig = plots.design_bars(pd.DataFrame({"design": ["naive"], "e2e_s": [1.0], "ttft_mean_s": [0.1]}))
    for _ in range(2):
        bundle = live.static(fig)._repr_mimebundle_()
        spec = bundle[live.PLOTLY_MIME]
        assert spec["data"][0]["type"] == "bar" and "layout" in spec
        assert "<script" not in json.dumps(spec)


def test_figures_draw_from_rollouts(frames: dict[str, pd.DataFrame]) -> None:
    naive, ws = frames["naive"], frames["websocket"]
    bars = plots.turn_buckets(naive)
    assert [t.name for t in bars.data] == ["API service", "inference", "client (tools, request)"]
    assert len(bars.data[0].x) == 4
    growth = plots.history_growth(frames)
    reading = f"reading the history ({', '.join(HISTORY_STAGES)})"
    whole = ["naive: the whole API time", "websocket: the whole API time"]
    assert [t.name for t in growth.data] == [*whole, f"naive: {reading}", f"websocket: {reading}"]
    assert list(growth.data[0].x) == sorted(growth.data[0].x)  # the history only grows
    assert all(part < whole for part, whole in zip(growth.data[2].y, growth.data[0].y, strict=True))
    waterfall = plots.stage_waterfall(ws, 1)
    stages = [label.split(" ", 1)[1] for t in waterfall.data for label in t.y]
    assert {"render", "prefill", "decode", "tool"} <= set(stages)
    assert "observe" not in stages
    gantt = plots.rollout_gantt(frames)
    assert {y for t in gantt.data for y in t.y} == {"naive", "websocket"}
    tokens = plots.stage_tokens(frames, "input_safety")
    naive_line, ws_line = (list(t.y) for t in tokens.data)
    assert naive_line[-1] > 2 * ws_line[-1]
    race = plots.race(frames)
    assert all(list(t.y) == sorted(t.y) for t in race.data)


def test_the_waterfall_draws_the_downlink_where_its_definition_says_it_is_paid() -> None:
    """With a round trip to pay, the downlink (the network back to the client) is held before the
    response's first event: the waterfall draws it ending before queue and prefill start, and its
    definition, shown on hover and in the glossary, says so."""
    with LabkitServer(args=["--profile", "production-like"]) as srv:
        frame = Rollout.run(srv.base_url, "naive", "synthetic:turns=2,tool_tokens=50").frame()
    waterfall = plots.stage_waterfall(frame, 1)
    bars = {
        label.split(" ", 1)[1]: (base, base + width, meaning)
        for trace in waterfall.data
        for label, base, width, meaning in zip(trace.y, trace.base, trace.x, trace.customdata, strict=True)
    }
    downlink_ends = bars["downlink"][1]
    assert downlink_ends > bars["downlink"][0]  # 10 ms, half of production-like's round trip
    assert downlink_ends <= bars["prefill"][0] + 1e-6
    meaning = bars["downlink"][2].replace("<br>", " ")
    assert meaning == DEFINITIONS["downlink"] and "before inference starts" in meaning


def test_empty_data_draws_the_same_traces() -> None:
    """Live plots start from nothing: the traces exist before the data does."""
    assert len(plots.turn_buckets(None).data) == 3
    assert [t.name for t in plots.race({"naive": None, "sprint": None}).data] == ["naive", "sprint"]
    assert len(plots.stage_tokens({"a": None}, "render").data) == 1


def test_colours_are_one_per_design_and_bucket() -> None:
    assert plots.design_color("naive") != plots.design_color("websocket")
    composed = ["naive", "naive+render_cache", "naive+render_cache+model_config_cache"]
    colors = [plots.design_color(n, composed) for n in composed]
    assert len(set(colors)) == 3
    assert set(plots.BUCKET_COLORS) == {"api", "inference", "client"}
