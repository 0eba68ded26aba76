"""The what-if lab's widgets: controls, four live figures, and a button that measures the point.

A thin layer over ``labkit.analysis.whatif``: every change of a control builds
a ``Settings``, asks the pure functions for DataFrames, and redraws the figures
(one batch each). The baseline control says what a saving is measured against
(naive, or the HTTP API after the sprint). "Measure this point" runs
``whatif.measure`` on a thread, so the cell that made the lab returns and the
page stays responsive; the controls are disabled meanwhile and a progress bar
follows the rollouts. The model-only control (a slower CPU) is priced but not
realised by a run: while it is moved, the button waits.

    lab_ui = WhatIfLab()
    display(lab_ui.widget)
    lab_ui.controls["decode_tps"].value = 4000    # the figures follow
    lab_ui.baseline.value = "sprint"              # savings against the sprint
    lab_ui.measure_button.click()                 # measures in the background
    await lab_ui.done()                           # (in a notebook cell, to wait for it)
    lab_ui.measured_rollouts["websocket"]         # each design's measured rollout, as a frame
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from typing import Any

import ipywidgets as widgets
import pandas as pd

from labkit.analysis import frontend, plots, whatif
from labkit.analysis.background import Background
from labkit.analysis.cost_model import CpuCosts
from labkit.analysis.live import LivePlot, StaticFigure, static
from labkit.analysis.tables import styled
from labkit.analysis.whatif.figures import mechanism_bars
from labkit.designs import DESIGNS

MODEL_ONLY = " (model only)"
LABELS = {
    "decode_tps": "decode (tok/s)",
    "prefill_tps": "prefill (tok/s)",
    "output_tokens": "output per turn (tok)",
    "rtt_ms": "round trip (ms)",
    "auth_ms": "auth hop (ms)",
    "model_config_ms": "model config (ms)",
    "intermediary_ms": "intermediary (ms)",
    "billing_ms": "billing hop (ms)",
    "classifier_ms_per_1k": "classifier ms/1k",
    "fast_classifier_ms_per_1k": "fast classifier ms/1k",
    "turns": "turns",
    "tool_tokens": "tool output (tok)",
    "instruction_tokens": "instructions (tok)",
    "tool_ms": "tool time (ms)",
    "cpu_factor": "CPU time ×" + MODEL_ONLY,
    "reconnect_rate": "reconnects",
}
assert set(LABELS) == set(whatif.RANGES), "every setting has a label"
assert all(LABELS[n].endswith(MODEL_ONLY) for n in whatif.MODEL_ONLY), "model-only controls say so"
COLUMNS = (list(LABELS)[:8], list(LABELS)[8:])  # the model, network and hops; the rest
TOOLTIPS = {
    "cpu_factor": "This machine's measured CPU costs times this factor. Priced by the cost model only.",
    "reconnect_rate": (
        "The share of WebSocket turns after the first that find the connection gone and send the "
        "whole history on a new socket. Measured too: the client drops its socket on those turns."
    ),
}
CUSTOM = "(your settings)"
SETTLE_S = 1.0  # after its views are up, how long the lab gives plotly to draw them
READOUTS = {"reconnect_rate": ".0%", "cpu_factor": ".1f"}
_INTEGER = {f.name for f in fields(whatif.Settings) if f.type in ("int", int)}


def _control(name: str, value: float) -> widgets.Widget:
    low, high, step = whatif.RANGES[name]
    style, layout = {"description_width": "170px"}, widgets.Layout(width="440px")
    common = {
        "description": LABELS[name],
        "style": style,
        "layout": layout,
        "continuous_update": False,
        "tooltip": TOOLTIPS.get(name, ""),
    }
    if step == 0:  # a speed: a log scale across its range
        low_exp, high_exp = math.log10(low), math.log10(high)
        return widgets.FloatLogSlider(
            value=value, base=10, min=low_exp, max=high_exp, step=0.01, readout_format=".0f", **common
        )
    if name in _INTEGER:
        return widgets.IntSlider(value=value, min=int(low), max=int(high), step=int(step), **common)
    readout = READOUTS.get(name, ".1f")
    return widgets.FloatSlider(value=value, min=low, max=high, step=step, readout_format=readout, **common)


class WhatIfLab:
    def __init__(
        self,
        settings: whatif.Settings | None = None,
        cpu: CpuCosts | None = None,
        measure: Callable[..., pd.DataFrame] | None = None,
    ) -> None:
        start = settings or whatif.PRESETS["fast coding model (1,000 tokens/s)"]
        self.cpu = cpu or CpuCosts.measure()
        self._measure = measure or self._measure_rollouts
        self.controls = {f.name: _control(f.name, getattr(start, f.name)) for f in fields(whatif.Settings)}
        self.preset = widgets.Dropdown(
            options=[*whatif.PRESETS, CUSTOM], value=_preset_of(start), description="preset"
        )
        self.baseline = widgets.Dropdown(
            options=list(whatif.BASELINES),
            value="naive",
            description="savings against",
            style={"description_width": "initial"},
        )
        self.design = widgets.Dropdown(
            options=list(DESIGNS),
            value="websocket",
            description="stages of",
            style={"description_width": "initial"},
        )
        self.measure_button = widgets.Button(description="Measure this point", button_style="primary")
        self.progress = widgets.IntProgress(value=0, min=0, max=len(DESIGNS) + 1, description="measured")
        self.status = widgets.Label("")
        self.table = widgets.HTML("")
        self.comparison = widgets.HTML("")
        self.predictions = LivePlot(plots.prediction_bars)
        self.mechanisms = LivePlot(mechanism_bars)
        self.curve = LivePlot(plots.saving_curve)
        self.breakdown = LivePlot(plots.stage_breakdown)
        self.predicted: pd.DataFrame | None = None
        self.measured: pd.DataFrame | None = None
        self.measured_at: whatif.Settings | None = None
        # The measured point's rollouts, by design (``lab.saving`` reads them turn by turn); kept
        # when the lab measures with ``whatif.measure_rollouts``, its default.
        self.measured_rollouts: dict[str, pd.DataFrame] | None = None
        self._rollouts: dict[str, pd.DataFrame] | None = None
        self.task = Background("labkit-what-if")
        self._quiet = False  # while a preset sets several controls, redraw once at the end
        self._paused = False  # while a cell tries settings out (``paused``), the figures wait

        figures = self._draw()
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.preset, self.baseline, self.design]),
                widgets.HBox([widgets.VBox([self.controls[n] for n in column]) for column in COLUMNS]),
                widgets.HBox([self.measure_button, self.progress, self.status]),
                self.predictions.build(*figures["predictions"]),
                self.table,
                self.comparison,
                self.mechanisms.build(*figures["mechanisms"]),
                self.curve.build(*figures["curve"]),
                self.breakdown.build(*figures["breakdown"]),
            ]
        )
        for control in [*self.controls.values(), self.baseline, self.design]:
            control.observe(self._changed, names="value")
        self.preset.observe(self._preset_chosen, names="value")
        self.measure_button.on_click(lambda _button: self.measure())
        self._offer_measuring()

    # ------------------------------------------------------------ settings and redrawing

    @property
    def settings(self) -> whatif.Settings:
        values = {name: control.value for name, control in self.controls.items()}
        return whatif.Settings(**values)

    def _draw(self) -> dict[str, tuple[Any, ...]]:
        """Everything the figures show for the current settings (pure functions only)."""
        settings, baseline = self.settings, self.baseline.value
        self.predicted = whatif.predict(settings, self.cpu)
        curve = whatif.saving_by_speed(settings, self.cpu, baseline=baseline)
        here = self.predicted.set_index("design").loc["websocket", whatif.saving_column(baseline)]
        measured = self.measured if self.measured_at == settings else None
        self.table.value = _html(whatif.prediction_table(self.predicted, baseline))
        self.comparison.value = "" if measured is None else _comparison_html(self.predicted, measured)
        return {
            "predictions": (self.predicted, measured),
            "mechanisms": (whatif.mechanism_savings(settings, self.cpu, baseline), baseline),
            "curve": (curve, settings.decode_tps, float(here), baseline),
            "breakdown": (whatif.breakdown(settings, self.design.value, self.cpu), self.design.value),
        }

    def refresh(self) -> None:
        figures = self._draw()
        self.predictions.update(*figures["predictions"])
        self.mechanisms.update(*figures["mechanisms"])
        self.curve.update(*figures["curve"])
        self.breakdown.update(*figures["breakdown"])

    def _changed(self, _change: dict[str, Any]) -> None:
        if self._quiet:
            return
        if self.preset.value != (matching := _preset_of(self.settings)):  # a preset's name, when it is one
            self._quiet = True
            self.preset.value = matching
            self._quiet = False
        if self._paused:
            self.predicted = whatif.predict(self.settings, self.cpu)
            return
        self.refresh()
        self._offer_measuring()

    @contextmanager
    def paused(self) -> Iterator[WhatIfLab]:
        """Try settings out without redrawing: ``predicted`` follows every change, the figures wait,
        and are redrawn once at the end if the settings did not come back to where they were.

            with lab_ui.paused():
                lab_ui.controls["output_tokens"].value = 600
                saving = lab_ui.predicted          # the prediction at 600 tokens a turn
                lab_ui.controls["output_tokens"].value = 60
        """
        drawn, self._paused = self.settings, True
        try:
            yield self
        finally:
            self._paused = False
            if self.settings != drawn:
                self.refresh()
            self._offer_measuring()

    def _preset_chosen(self, change: dict[str, Any]) -> None:
        if self._quiet or change["new"] == CUSTOM:
            return
        self._quiet = True
        try:
            for name, value in asdict(whatif.PRESETS[change["new"]]).items():
                self.controls[name].value = value
        finally:
            self._quiet = False
        self.refresh()
        self._offer_measuring()

    def _offer_measuring(self) -> None:
        """The button measures only a point a run can realise: not with a model-only control moved."""
        if self.task.running:
            return
        moved = self.settings.model_only()
        self.measure_button.disabled = bool(moved)
        if moved:
            names = " and ".join(LABELS[n].removesuffix(MODEL_ONLY) for n in moved)
            self.status.value = f"{names}: the cost model's only; set back to measure this point"
        elif self.status.value.endswith("to measure this point"):
            self.status.value = ""

    # ------------------------------------------------------------ measuring

    def measure(self) -> None:
        """Run the current point for real on a thread; the figures show the result when it ends."""
        if self.task.running:
            return
        if self.settings.model_only():
            self._offer_measuring()
            return
        settings = self.settings

        def progress(done: int, total: int, what: str) -> None:
            self.task.in_main(lambda: self._progress(done, total, what))

        def finished(measured: pd.DataFrame | None, error: Exception | None) -> None:
            message = f"measuring failed: {error}" if error else "measured: diamonds on the bars"
            self._finished(measured, settings, message)

        self._enable(False)
        self.progress.value, self.status.value = 0, "starting"
        self.task.start(lambda: self._measure(settings, progress=progress), finished)

    def _measure_rollouts(self, settings: whatif.Settings, progress: Callable[..., None]) -> pd.DataFrame:
        """The default measurement: the rollouts, kept for ``measured_rollouts``, and their table."""
        self._rollouts = whatif.measure_rollouts(settings, progress=progress)
        return whatif.measured_table(self._rollouts)

    def _progress(self, done: int, total: int, what: str) -> None:
        self.progress.max, self.progress.value, self.status.value = total, done, what

    def _finished(self, measured: pd.DataFrame | None, settings: whatif.Settings, message: str) -> None:
        if measured is not None:
            self.measured, self.measured_at = measured, settings
            self.measured_rollouts, self._rollouts = self._rollouts, None
        self.status.value = message
        self._enable(True)
        self.refresh()
        self._offer_measuring()

    def _enable(self, on: bool) -> None:
        choices = [self.preset, self.baseline, self.design, self.measure_button]
        for control in [*self.controls.values(), *choices]:
            control.disabled = not on

    def wait(self, timeout: float = 120.0) -> None:
        """Block until a measurement started by the button has finished (outside an event loop)."""
        self.task.wait(timeout)

    async def shown(self, timeout: float = 20.0) -> bool:
        """Wait (``await lab_ui.shown()``) until a browser shows each of the lab's figures, and a
        moment more for them to draw: in a page still loading plotly, a figure redrawn before its
        view is up can stay blank. The figures' live widgets are made here if the lab was built
        before the kernel knew that a front end draws them (``LivePlot.go_live``). Where nothing
        draws widgets, it returns at once, and the lab holds no figure widget."""
        if not await frontend.draws_widgets():
            return False
        plots = (self.predictions, self.mechanisms, self.curve, self.breakdown)
        for plot in plots:
            plot.go_live()
        deadline = time.monotonic() + timeout
        while not all(map(_on_screen, plots)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the kernel reads the browser's messages meanwhile
        await asyncio.sleep(SETTLE_S)
        return all(map(_on_screen, plots))

    def static_figures(self) -> list[StaticFigure]:
        """Where no front end draws widgets (a headless run, an HTML export), the lab's four
        figures as they stand, static; none where one does (ask after ``await lab_ui.shown()``).

            await lab_ui.shown()
            display(*lab_ui.static_figures())
        """
        if frontend.known() is not False:
            return []
        plots = (self.predictions, self.mechanisms, self.curve, self.breakdown)
        return [static(plot.figure) for plot in plots if plot.figure is not None]

    async def done(self, timeout: float = 120.0) -> None:
        """Wait in a notebook cell for the measurement to finish, the kernel serving the page."""
        await self.task.done(timeout)


def _on_screen(plot: LivePlot) -> bool:
    """Whether a browser shows the plot's live widget. JupyterLab says so in one of two ways, not
    always both (measured with plotly 7 in JupyterLab 4.6): plotly.js reports the first draw
    (``LivePlot.drawn``), or the widget manager counts a view; waiting for one sign alone waited
    out the timeout for half the lab's figures."""
    widget = plot.widget
    return plot.drawn or bool(widget is not None and widget._view_count)


def _preset_of(settings: whatif.Settings) -> str:
    """The name of the preset these settings are, or ``CUSTOM``."""
    return next((name for name, preset in whatif.PRESETS.items() if preset == settings), CUSTOM)


def _html(table: pd.DataFrame) -> str:
    """A table with units as HTML, one header row (no row for the index's name)."""
    return styled(table.rename_axis(None)).to_html()


def _comparison_html(predicted: pd.DataFrame, measured: pd.DataFrame) -> str:
    return _html(whatif.comparison_table(predicted, measured))
