"""The what-if lab's replay section: a recorded agent session, priced for every design and speed.

A learner picks one of the sessions labkit ships (``data/replays/``) or gives the path of a
file of their own (a Codex CLI ``rollout-*.jsonl``, or a transcript). Every change prices the
recording at once with the cost model (``labkit.analysis.replay.price``: ``Shape.of`` on the
replay scenario, then every design at every chosen speed). **Measure this replay** runs it for
real in the background (``labkit.analysis.replay.replay``, what ``labkit replay`` runs), the
controls disabled meanwhile, and puts the measurements on the prediction. A file that cannot
be replayed gets the reader's one-line error in the status line, never a traceback.

    replay_ui = ReplayLab(cpu=lab.cpu_costs())
    display(replay_ui.widget)
    replay_ui.recording.value = OWN
    replay_ui.path.value = "~/.codex/sessions/2026/01/02/rollout-….jsonl"
    replay_ui.measure_button.click()       # measures in the background
    await replay_ui.done()                 # (in a notebook cell, to wait for it)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from labkit.analysis import frontend, replay, whatif
from labkit.analysis.background import Background
from labkit.analysis.cost_model import CpuCosts
from labkit.analysis.live import LivePlot, StaticFigure, static
from labkit.analysis.style import LEGEND_ABOVE, layout
from labkit.analysis.tables import E2E, TTFT, saved, styled
from labkit.designs import DESIGNS
from labkit.scenarios.replay import ReplayError

OWN = "(a file of your own: its path below)"
SPEEDS = sorted(p.decode_tps for p in whatif.PRESETS.values())  # the articles' three
CHOSEN = (65, 1000)  # as `labkit replay` runs by default
MEASURED_AT = "measured: diamonds on the bars"


def recordings(folder: Path = replay.REPLAYS) -> dict[str, Path]:
    """The sessions labkit ships, by file name.

    >>> sorted(recordings())
    ['codex-http.jsonl', 'codex-websocket.jsonl', 'transcript-http.json']
    """
    return {p.name: p for p in sorted(folder.iterdir()) if p.suffix in (".jsonl", ".json")}


class ReplayLab:
    def __init__(
        self,
        cpu: CpuCosts | None = None,
        measure: Callable[..., replay.ReplayResult] = replay.replay,
        folder: Path = replay.REPLAYS,
    ) -> None:
        self.cpu = cpu or CpuCosts.measure()
        self._measure = measure
        self.files = recordings(folder)
        self.recording = widgets.Dropdown(
            options=[*self.files, OWN], description="recording", style={"description_width": "initial"}
        )
        self.path = widgets.Text(
            placeholder="a Codex CLI rollout-….jsonl or a transcript .json",
            description="path",
            continuous_update=False,
            disabled=True,
            layout=widgets.Layout(width="560px"),
        )
        self.speeds = {
            tps: widgets.Checkbox(value=tps in CHOSEN, description=f"{tps:,.0f} tokens/s", indent=False)
            for tps in SPEEDS
        }
        self.about = widgets.Label("")
        self.status = widgets.Label("")
        self.measure_button = widgets.Button(description="Measure this replay", button_style="primary")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="measured")
        self.table = widgets.HTML("")
        self.comparison = widgets.HTML("")
        self.figure = LivePlot(saving_bars)
        self.priced: pd.DataFrame | None = None
        self.measured: pd.DataFrame | None = None
        self.measured_at: tuple[Path, tuple[float, ...]] | None = None
        self.task = Background("labkit-replay")

        figure = self._draw()
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.recording, *self.speeds.values()]),
                self.path,
                self.about,
                widgets.HBox([self.measure_button, self.progress, self.status]),
                self.figure.build(*figure),
                self.table,
                self.comparison,
            ]
        )
        for control in [self.recording, self.path, *self.speeds.values()]:
            control.observe(self._changed, names="value")
        self.measure_button.on_click(lambda _button: self.measure())

    # ------------------------------------------------------------ the recording and its price

    @property
    def source(self) -> Path | None:
        """The chosen file: one of labkit's, or the learner's path (None while it is empty)."""
        if self.recording.value != OWN:
            return self.files[self.recording.value]
        text = self.path.value.strip()
        return Path(text).expanduser() if text else None

    @property
    def tps(self) -> tuple[float, ...]:
        return tuple(tps for tps, box in self.speeds.items() if box.value)

    def _draw(self) -> tuple[Any, ...]:
        """Price the chosen recording; on a file that cannot be replayed, its one-line error."""
        self.priced, self.about.value, message = None, "", ""
        source, speeds = self.source, self.tps
        measurable = source is not None and bool(speeds)
        if source is None:
            message = "type the path of a recorded session"
        elif not speeds:
            message = "choose at least one speed"
        else:
            try:
                priced = replay.price(source, cpu=self.cpu, tps=speeds)
            except (ReplayError, OSError) as e:
                message, measurable = _one_line(source, e), False
            else:
                self.priced = priced.table
                self.about.value = replay.describe(priced.replay)
        self.status.value = message
        self.measure_button.disabled = not measurable
        measured = self.measured if self.measured_at == (source, speeds) else None
        self.table.value = "" if self.priced is None else _html(price_table(self.priced))
        self.comparison.value = "" if measured is None else _html(comparison_table(self.priced, measured))
        return (self.priced, measured)

    def refresh(self) -> None:
        self.figure.update(*self._draw())

    def _changed(self, change: dict[str, Any]) -> None:
        if change["owner"] is self.recording:
            self.path.disabled = self.recording.value != OWN
        self.refresh()

    # ------------------------------------------------------------ measuring

    def measure(self) -> None:
        """Replay the chosen file for real, every design at every chosen speed, on a thread."""
        source, speeds = self.source, self.tps
        if self.task.running or source is None or not speeds:
            return
        total = 1 + len(speeds) * len(DESIGNS)  # the recording read, then each rollout

        def progress(line: str) -> None:
            self.task.in_main(lambda: self._progress(total, line))

        def finished(result: replay.ReplayResult | None, error: Exception | None) -> None:
            if result is not None:
                self.measured, self.measured_at = result.table, (source, speeds)
            self._enable(True)
            self.refresh()
            self.status.value = (
                MEASURED_AT if error is None else f"measuring failed: {_one_line(source, error)}"
            )

        self._enable(False)
        self.progress.max, self.progress.value, self.status.value = total, 0, "starting"
        self.task.start(lambda: self._measure(source, tps=speeds, progress=progress), finished)

    def _progress(self, total: int, line: str) -> None:
        self.progress.value = min(total, self.progress.value + 1)
        self.status.value = line.strip()

    def _enable(self, on: bool) -> None:
        for control in [self.recording, *self.speeds.values(), self.measure_button]:
            control.disabled = not on
        self.path.disabled = not on or self.recording.value != OWN

    @property
    def compared(self) -> pd.DataFrame | None:
        """The last measurement beside the prediction, per speed and design (None until measured)."""
        if self.measured is None or self.measured_at != (self.source, self.tps):
            return None
        return comparison_table(self.priced, self.measured)

    def wait(self, timeout: float = 300.0) -> None:
        """Block until a measurement started by the button has finished (outside an event loop)."""
        self.task.wait(timeout)

    async def done(self, timeout: float = 300.0) -> None:
        """Wait in a notebook cell for the measurement to finish, the kernel serving the page."""
        await self.task.done(timeout)

    def static_figures(self) -> list[StaticFigure]:
        """Where no front end draws widgets (a headless run, an HTML export), the figure as it
        stands, static; none where one does."""
        if frontend.known() is not False or self.figure.figure is None:
            return []
        return [static(self.figure.figure)]


def _one_line(source: Path, error: Exception) -> str:
    """A reader's error as the learner sees it: the file's name, then the reader's own line."""
    if isinstance(error, OSError):
        return f"cannot read '{source}': {error.strerror or error}"
    return f"{source.name}: {error}"


def _html(table: pd.DataFrame) -> str:
    return styled(table.rename_axis(None)).to_html()


# ---------------------------------------------------------------- tables and the figure


def _label(tps: float) -> str:
    return f"{tps:,.0f} tokens/s"


def price_table(priced: pd.DataFrame) -> pd.DataFrame:
    """The price per speed and design, for people: end to end, the saving against naive, TTFT."""
    rows = priced.set_index(["tps", "design"])
    table = pd.DataFrame(
        {E2E: rows["e2e_s"], saved("naive"): rows[replay.SAVED], TTFT: rows["ttft_mean_s"] * 1000}
    )
    table.index = [f"{_label(tps)}, {design}" for tps, design in table.index]
    return table


def comparison_table(priced: pd.DataFrame | None, measured: pd.DataFrame) -> pd.DataFrame:
    """Measured beside predicted, per speed and design (predicted columns empty where the model
    could not price the recording)."""
    got = measured.set_index(["tps", "design"])
    table = pd.DataFrame(
        {"end to end, measured (s)": got["e2e_s"], "saved vs naive, measured": got[replay.SAVED]}
    )
    if priced is not None:
        model = priced.set_index(["tps", "design"])
        table["end to end, predicted (s)"] = model["e2e_s"]
        table["saved vs naive, predicted"] = model[replay.SAVED]
    table.index = [f"{_label(tps)}, {design}" for tps, design in table.index]
    return table


SPEED_COLORS = {65: "#9ecae1", 1000: "#3182bd", 4000: "#08519c"}  # slow to fast: light to dark


def saving_bars(
    priced: pd.DataFrame | None, measured: pd.DataFrame | None = None, speeds: Sequence[float] = SPEEDS
) -> go.Figure:
    """Each design's saving against naive, a group of bars per speed (the cost model's), with
    the measured savings as diamonds on them. The traces are always the same (a bar and a
    diamond trace per speed, hidden where there is nothing to show), so a live figure redraws
    in place."""
    fig = go.Figure()
    for frame, kind in ((priced, "predicted"), (measured, "measured")):
        for tps in speeds:
            rows = frame[frame["tps"] == tps] if frame is not None else None
            shown = rows is not None and not rows.empty
            common = {
                "x": list(rows["design"]) if shown else [],
                "y": list(rows[replay.SAVED]) if shown else [],
                "offsetgroup": _label(tps),
                "legendgroup": _label(tps),
                "visible": shown,
            }
            if kind == "predicted":
                fig.add_trace(go.Bar(name=_label(tps), marker_color=SPEED_COLORS.get(tps, "#888"), **common))
            else:
                marker = {"symbol": "diamond", "size": 12, "color": "black"}
                fig.add_trace(
                    go.Scatter(
                        name=f"measured, {_label(tps)}",
                        mode="markers",
                        marker=marker,
                        showlegend=False,
                        **common,
                    )
                )
    layout(
        fig,
        "Saved against naive on the recorded session, by design and speed",
        "design",
        "saved vs naive",
        barmode="group",
        scattermode="group",
        legend=LEGEND_ABOVE,
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
    )
    fig.update_xaxes(categoryorder="array", categoryarray=list(DESIGNS))
    fig.update_yaxes(tickformat=".0%")
    return fig
