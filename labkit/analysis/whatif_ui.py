"""The what-if lab's widgets: controls, three live figures, and a button that measures the point.

A thin layer over ``labkit.analysis.whatif``: every change of a control builds
a ``Settings``, asks the pure functions for DataFrames, and redraws the figures
(one batch each). "Measure this point" runs ``whatif.measure`` on a thread, so
the cell that made the lab returns and the page stays responsive; the controls
are disabled meanwhile and a progress bar follows the rollouts.

    lab_ui = WhatIfLab()
    display(lab_ui.widget)
    lab_ui.controls["decode_tps"].value = 4000    # the figures follow
    lab_ui.measure_button.click()                 # measures in the background
    await lab_ui.done()                           # (in a notebook cell, to wait for it)
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any

import ipywidgets as widgets
import pandas as pd

from labkit.analysis import plots, whatif
from labkit.analysis.cost_model import CpuCosts
from labkit.analysis.live import LivePlot
from labkit.designs import DESIGNS

LABELS = {
    "decode_tps": "decode (tok/s)",
    "prefill_tps": "prefill (tok/s)",
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
}
CUSTOM = "(your settings)"


def _control(name: str, value: float) -> widgets.Widget:
    low, high, step = whatif.RANGES[name]
    style, layout = {"description_width": "150px"}, widgets.Layout(width="420px")
    common = {"description": LABELS[name], "style": style, "layout": layout, "continuous_update": False}
    if step == 0:  # a speed: a log scale across its range
        low_exp, high_exp = math.log10(low), math.log10(high)
        return widgets.FloatLogSlider(
            value=value, base=10, min=low_exp, max=high_exp, step=0.01, readout_format=".0f", **common
        )
    if isinstance(value, int):
        return widgets.IntSlider(value=value, min=int(low), max=int(high), step=int(step), **common)
    return widgets.FloatSlider(value=value, min=low, max=high, step=step, **common)


class WhatIfLab:
    def __init__(
        self,
        settings: whatif.Settings | None = None,
        cpu: CpuCosts | None = None,
        measure: Callable[..., pd.DataFrame] = whatif.measure,
    ) -> None:
        start = settings or whatif.PRESETS["fast coding model (1,000 tokens/s)"]
        self.cpu = cpu or CpuCosts.measure()
        self._measure = measure
        self.controls = {f.name: _control(f.name, getattr(start, f.name)) for f in fields(whatif.Settings)}
        matching = [name for name, preset in whatif.PRESETS.items() if preset == start]
        chosen = matching[0] if matching else CUSTOM
        self.preset = widgets.Dropdown(options=[*whatif.PRESETS, CUSTOM], value=chosen, description="preset")
        self.design = widgets.Dropdown(
            options=list(DESIGNS),
            value="websocket",
            description="stages of",
            style={"description_width": "initial"},
        )
        self.measure_button = widgets.Button(description="Measure this point", button_style="primary")
        self.progress = widgets.IntProgress(value=0, min=0, max=len(DESIGNS) + 1, description="measured")
        self.status = widgets.Label("")
        self.comparison = widgets.HTML("")
        self.predictions = LivePlot(plots.prediction_bars)
        self.breakdown = LivePlot(plots.stage_breakdown)
        self.curve = LivePlot(plots.saving_curve)
        self.predicted: pd.DataFrame | None = None
        self.measured: pd.DataFrame | None = None
        self.measured_at: whatif.Settings | None = None
        self.thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._quiet = False  # while a preset sets several controls, redraw once at the end

        figures = self._draw()
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.preset, self.design]),
                widgets.HBox(
                    [
                        widgets.VBox([self.controls[n] for n in list(LABELS)[:7]]),
                        widgets.VBox([self.controls[n] for n in list(LABELS)[7:]]),
                    ]
                ),
                widgets.HBox([self.measure_button, self.progress, self.status]),
                self.predictions.build(*figures["predictions"]),
                self.comparison,
                self.curve.build(*figures["curve"]),
                self.breakdown.build(*figures["breakdown"]),
            ]
        )
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.design.observe(self._changed, names="value")
        self.preset.observe(self._preset_chosen, names="value")
        self.measure_button.on_click(lambda _button: self.measure())

    # ------------------------------------------------------------ settings and redrawing

    @property
    def settings(self) -> whatif.Settings:
        values = {name: control.value for name, control in self.controls.items()}
        return whatif.Settings(**values)

    def _draw(self) -> dict[str, tuple[Any, ...]]:
        """Everything the figures show for the current settings (pure functions only)."""
        settings = self.settings
        self.predicted = whatif.predict(settings, self.cpu)
        curve = whatif.saving_curve(settings, self.cpu)
        here = self.predicted.set_index("design").loc["websocket", "saved_vs_naive"]
        measured = self.measured if self.measured_at == settings else None
        self.comparison.value = "" if measured is None else _comparison_html(self.predicted, measured)
        return {
            "predictions": (self.predicted, measured),
            "breakdown": (whatif.breakdown(settings, self.design.value, self.cpu), self.design.value),
            "curve": (curve, settings.decode_tps, float(here)),
        }

    def refresh(self) -> None:
        figures = self._draw()
        self.predictions.update(*figures["predictions"])
        self.breakdown.update(*figures["breakdown"])
        self.curve.update(*figures["curve"])

    def _changed(self, _change: dict[str, Any]) -> None:
        if self._quiet:
            return
        if self.preset.value != CUSTOM and whatif.PRESETS.get(self.preset.value) != self.settings:
            self._quiet = True
            self.preset.value = CUSTOM
            self._quiet = False
        self.refresh()

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

    # ------------------------------------------------------------ measuring

    def measure(self) -> None:
        """Run the current point for real on a thread; the figures show the result when it ends."""
        if self.thread is not None and self.thread.is_alive():
            return
        try:
            self._loop = asyncio.get_running_loop()  # the kernel's: widget updates go through it
        except RuntimeError:
            self._loop = None
        settings = self.settings
        self._enable(False)
        self.progress.value, self.status.value = 0, "starting"
        self.thread = threading.Thread(target=self._run, args=(settings,), name="labkit-what-if", daemon=True)
        self.thread.start()

    def _run(self, settings: whatif.Settings) -> None:
        def progress(done: int, total: int, what: str) -> None:
            self._in_main(lambda: self._progress(done, total, what))

        try:
            measured = self._measure(settings, progress=progress)
        except Exception as exc:  # shown to the learner; the lab stays usable
            message = f"measuring failed: {exc}"
            self._in_main(lambda: self._finished(None, settings, message))
        else:
            self._in_main(lambda: self._finished(measured, settings, "measured: diamonds on the bars"))

    def _in_main(self, work: Callable[[], None]) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(work)
        else:
            work()

    def _progress(self, done: int, total: int, what: str) -> None:
        self.progress.max, self.progress.value, self.status.value = total, done, what

    def _finished(self, measured: pd.DataFrame | None, settings: whatif.Settings, message: str) -> None:
        if measured is not None:
            self.measured, self.measured_at = measured, settings
        self.status.value = message
        self._enable(True)
        self.refresh()

    def _enable(self, on: bool) -> None:
        for control in [*self.controls.values(), self.preset, self.design, self.measure_button]:
            control.disabled = not on

    def wait(self, timeout: float = 120.0) -> None:
        """Block until a measurement started by the button has finished (outside an event loop)."""
        if self.thread is not None:
            self.thread.join(timeout)

    async def done(self, timeout: float = 120.0) -> None:
        """Wait in a notebook cell for the measurement to finish, the kernel serving the page."""
        elapsed = 0.0
        while self.thread is not None and self.thread.is_alive() and elapsed < timeout:
            await asyncio.sleep(0.1)
            elapsed += 0.1
        await asyncio.sleep(0.1)  # the last widget updates, queued for this loop


def _comparison_html(predicted: pd.DataFrame, measured: pd.DataFrame) -> str:
    table = whatif.against(predicted, measured).set_index("design")
    shown = pd.DataFrame(
        {
            "end to end, predicted": table["e2e_s_predicted"].map("{:.2f} s".format),
            "measured": table["e2e_s_measured"].map("{:.2f} s".format),
            "difference": table["e2e_s_error"].map("{:+.0%}".format),
            "mean TTFT, predicted": (table["ttft_mean_s_predicted"] * 1000).map("{:.0f} ms".format),
            "measured ": (table["ttft_mean_s_measured"] * 1000).map("{:.0f} ms".format),
            "difference ": table["ttft_mean_s_error"].map("{:+.0%}".format),
        }
    )
    return shown.to_html()
