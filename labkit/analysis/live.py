"""Live plots: a standard figure redrawn as a rollout's turns arrive, one message per turn.

``LivePlot`` wraps a drawing function from ``labkit.analysis.plots``. In a
notebook it shows a plotly ``FigureWidget`` and, at each ``update``, redraws
the figure from the data so far and sends the change in one batch. Where no
browser drew the widget (a headless run), ``finish`` puts a static copy of the
last figure in its place (plotly.js embedded, no CDN), so the saved notebook
and an HTML export of it show the figure offline.

    plot = LivePlot(plots.turn_buckets).show(None)     # show before the work starts
    rollout = Rollout("naive")
    for record in rollout.play(server.base_url, watch=True):
        plot.update(rollout.frame())                   # one batched update per turn
    plot.finish()

The figure is the pure function's output at every step, so what the test
checks without a browser is what the learner sees.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

from labkit.analysis.plots import TEMPLATE

HEADLESS_ENV = "LABKIT_HEADLESS"  # set where notebooks run with no browser (CI)
_plotlyjs_embedded = False  # the first static figure of a session carries plotly.js for the rest


class LivePlot:
    """One standard figure, redrawn from the data so far at every ``update``.

        plot = LivePlot(plots.race, title="Time so far").show({"naive": None, "websocket": None})
        await plot.shown()                             # a fresh page loads plotly first
        plot.update({"naive": frame_so_far, "websocket": None})
    """

    def __init__(self, draw: Callable[..., go.Figure], **options: Any) -> None:
        self.draw = functools.partial(draw, **options)  # options: fixed at every redraw (a title)
        self.widget: go.FigureWidget | None = None
        self.figure: go.Figure | None = None  # the latest drawing, as the pure function made it
        self.updates = 0  # batches sent to the widget
        self.drawn = False  # a browser has drawn the widget (it reports its traces once drawn)
        self._handle: Any = None

    def show(self, *args: Any, **kwargs: Any) -> LivePlot:
        """Draw the figure from the data so far (often none yet) and display it."""
        from IPython.display import display

        self._handle = display(self.build(*args, **kwargs), display_id=True)
        return self

    def build(self, *args: Any, **kwargs: Any) -> go.FigureWidget:
        """The widget, drawn from the data so far, without displaying it (to place in a layout)."""
        self.figure = self.draw(*args, **kwargs)
        self.widget = go.FigureWidget(self.figure)
        self.widget.observe(self._drawn, names=["_js2py_traceDeltas", "_js2py_layoutDelta"])
        return self.widget

    def _drawn(self, change: dict[str, Any]) -> None:
        if change.get("new"):
            self.drawn = True

    async def shown(self, timeout: float = 15.0) -> bool:
        """Wait (``await plot.shown()``) until a browser has drawn the widget, so the first
        updates are seen live: a fresh page takes seconds to load plotly. Returns at once when
        no browser is watching (``LABKIT_HEADLESS`` set, as in a headless run)."""
        if self.widget is None:
            raise RuntimeError("show() the plot first")
        if os.environ.get(HEADLESS_ENV):
            return False
        deadline = time.monotonic() + timeout
        while not self.drawn and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the kernel reads the browser's messages meanwhile
        return self.drawn

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Redraw from the data so far and send the difference to the widget in one batch."""
        if self.widget is None:
            raise RuntimeError("show() the plot before updating it")
        self.figure = self.draw(*args, **kwargs)
        widget = self.widget
        fresh = self.figure.data
        if len(widget.data) > len(fresh):
            widget.data = widget.data[: len(fresh)]
        with widget.batch_update():
            for old, new in zip(widget.data, fresh, strict=False):
                old.update(new.to_plotly_json(), overwrite=True)
            widget.layout.update(self.figure.layout.to_plotly_json(), overwrite=True)
        if len(fresh) > len(widget.data):
            widget.add_traces(list(fresh[len(widget.data) :]))
        self.updates += 1

    def finish(self, *args: Any, **kwargs: Any) -> go.Figure:
        """A last redraw (if data is given); then, if no browser drew the widget, a static
        figure takes its place (a browser that did keeps the live one)."""
        if args or kwargs:
            self.update(*args, **kwargs)
        assert self.figure is not None, "show() the plot first"
        if self._handle is not None and not self.drawn:
            self._handle.update(static(self.figure))
        return self.figure


async def shown(*plots: LivePlot, timeout: float = 15.0) -> None:
    """Wait until a browser has drawn each of these plots (see ``LivePlot.shown``).

        await shown(bars, growth)
    """
    for plot in plots:
        await plot.shown(timeout=timeout)


def static(fig: go.Figure) -> Any:
    """A figure as self-contained HTML that shows without a kernel or a network.

    plotly.js (about 4.6 MB) is embedded in the first static figure of a session
    only; later ones draw with it, as they sit in the same page.
    """
    from IPython.display import HTML

    global _plotlyjs_embedded
    include = not _plotlyjs_embedded
    _plotlyjs_embedded = True
    fig = go.Figure(fig)
    fig.update_layout(template=fig.layout.template or TEMPLATE)
    return HTML(fig.to_html(full_html=False, include_plotlyjs=include, config={"displaylogo": False}))


def show(fig: go.Figure) -> None:
    """Display a finished figure statically (for a plot that does not change).

        show(plots.stage_waterfall(rollout.frame(), turn=3))
    """
    from IPython.display import display

    display(static(fig))
