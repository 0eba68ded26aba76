"""Live plots: a standard figure redrawn as a rollout's turns arrive, one message per turn.

``LivePlot`` wraps a drawing function from ``labkit.analysis.plots``. In a
notebook whose front end draws widgets it shows a plotly ``FigureWidget`` and,
at each ``update``, redraws the figure from the data so far and sends the
change in one batch. The widget is made only once the kernel knows that a front
end draws it (``labkit.analysis.frontend``; at the latest in ``shown``): its
state carries plotly's whole bundle, which a headless runner would store in the
executed notebook, once per plot. Where nothing draws widgets (a headless run),
``finish`` puts a static copy of the last figure in its place, so the saved
notebook and an HTML export of it show the figure offline (see ``static``).

    plot = LivePlot(plots.turn_buckets).show(None)     # show before the work starts
    await plot.shown()                                 # the live widget, where something draws it
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
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from labkit.analysis import frontend
from labkit.analysis.style import TEMPLATE

PLOTLY_MIME = "application/vnd.plotly.v1+json"
CONFIG = {"displaylogo": False}
PENDING = "(the figure follows when the work is done)"  # the output until the figure, live or static
# How long ``shown`` waits for a browser to draw a plot: a fresh page loads plotly first, which
# takes seconds; the first plots of a notebook on a busy machine may ask for longer.
DRAW_TIMEOUT_S = 15.0
_plotlyjs_embedded = False  # the first static figure of a kernel carries plotly.js for its page


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
        self.replaced = False  # the widget was drawn late, and rebuilt from the latest drawing
        self._handle: Any = None  # the output ``show`` displayed
        self._box: Any = None  # the place ``build`` made in a layout (an ipywidgets box)

    def show(self, *args: Any, **kwargs: Any) -> LivePlot:
        """Draw the figure from the data so far (often none yet) and display it.

        The live widget is displayed at once only where this kernel already knows that a front
        end draws widgets. Otherwise the output holds a line of text until ``shown`` learns the
        answer: a live widget then takes its place, or, where nothing draws widgets (a headless
        run), ``finish`` puts the static figure there and the executed notebook stores no plotly
        widget (its state brings plotly's whole bundle, megabytes, per plot).
        """
        from IPython.display import display

        self.figure = self.draw(*args, **kwargs)
        if frontend.known():
            self._handle = display(self._widget_of(self.figure), display_id=True)
        else:
            self._handle = display({"text/plain": PENDING}, raw=True, display_id=True)
        return self

    def build(self, *args: Any, **kwargs: Any) -> Any:
        """The figure's place in a layout, drawn from the data so far, without displaying it: an
        ipywidgets box holding the live widget where a front end is known to draw widgets, else an
        empty box that ``go_live`` fills (``shown`` does, once it learns that something does)."""
        import ipywidgets as widgets

        self.figure = self.draw(*args, **kwargs)
        self._box = widgets.VBox([self._widget_of(self.figure)] if frontend.known() else [])
        return self._box

    def go_live(self) -> go.FigureWidget:
        """The live widget, made from the latest drawing and put in the figure's place if it was
        not yet: call it once a front end is known to draw widgets (``shown`` does)."""
        if self.widget is None:
            if self.figure is None:
                raise RuntimeError("show() or build() the plot first")
            self._place(self._widget_of(self.figure))
        assert self.widget is not None
        return self.widget

    def _place(self, widget: go.FigureWidget) -> None:
        if self._box is not None:
            self._box.children = (widget,)
        elif self._handle is not None:
            self._handle.update(widget)

    def _widget_of(self, figure: go.Figure) -> go.FigureWidget:
        self.widget = go.FigureWidget(data=figure.data, layout=_widget_layout(figure))
        self.widget.observe(self._drawn, names=["_js2py_traceDeltas", "_js2py_layoutDelta"])
        return self.widget

    def _drawn(self, change: dict[str, Any]) -> None:
        if not change.get("new") or self.drawn:
            return
        self.drawn = True
        if self.updates:
            # The view came after updates were sent (a fresh page still loading plotly): it drew
            # the widget's first state and never saw them. A widget built from the latest drawing
            # takes its place; plotly is loaded by now, so it draws at once.
            self._place(self._widget_of(self.figure))
            self.replaced = True

    async def shown(self, timeout: float = DRAW_TIMEOUT_S) -> bool:
        """Wait (``await plot.shown()``) until a front end has drawn the widget, so the first
        updates are seen live: a fresh page takes seconds to load plotly. It learns first, once
        per kernel, whether anything draws widgets (``draws_widgets``): if so the live widget takes
        the figure's place (``go_live``); where nothing does (a headless runner) it returns at once
        and no widget is ever made."""
        if self.figure is None:
            raise RuntimeError("show() the plot first")
        if not await frontend.draws_widgets():
            return False
        self.go_live()
        deadline = time.monotonic() + timeout
        while not self.drawn and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the kernel reads the browser's messages meanwhile
        return self.drawn

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Redraw from the data so far and send the difference to the widget in one batch."""
        if self.figure is None:
            raise RuntimeError("show() the plot before updating it")
        self.figure = self.draw(*args, **kwargs)
        widget = self.widget
        if widget is None:  # no front end known to draw it: ``go_live`` or ``finish`` shows the drawing
            return
        fresh = self.figure.data
        if len(widget.data) > len(fresh):
            widget.data = widget.data[: len(fresh)]
        with widget.batch_update():
            for old, new in zip(widget.data, fresh, strict=False):
                old.update(new.to_plotly_json(), overwrite=True)
            widget.layout.update(_widget_layout(self.figure), overwrite=True)
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


def _widget_layout(figure: go.Figure) -> dict[str, Any]:
    """The figure's layout as the live widget takes it: a log axis without automatic margins.

    In plotly's widget a log axis with automatic margins (plotly's default template turns them
    on) draws but never finishes its first draw (plotly.js redraws such margins in a loop, its
    issue 4572): the widget never reports being drawn, so ``shown`` would wait out its timeout
    and ``finish`` would swap the live figure for a static copy. labkit's figures set their
    margins (``labkit.analysis.style.layout``); the static copy keeps the figure as drawn.

    >>> _widget_layout(go.Figure(layout={"yaxis_type": "log"}))["yaxis"]
    {'type': 'log', 'automargin': False}
    """
    layout = figure.layout.to_plotly_json()
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and axis.get("type") == "log":
            layout[name] = {**axis, "automargin": False}
    return layout


async def shown(*plots: LivePlot, timeout: float = DRAW_TIMEOUT_S) -> None:
    """Wait until a browser has drawn each of these plots (see ``LivePlot.shown``).

        await shown(bars, growth)
    """
    for plot in plots:
        await plot.shown(timeout=timeout)


class StaticFigure:
    """A finished figure as an output every front end can draw without a kernel.

    It carries two forms and each front end takes the one it renders:
    ``application/vnd.plotly.v1+json``, drawn by JupyterLab, Notebook 7 and VS Code
    with the plotly.js they bundle (offline, no script in the output), and HTML for
    the rest (HTML exports, Colab). The HTML draws with the page's plotly.js: the
    first static figure of a kernel embeds it (about 4.6 MB), so a notebook run top
    to bottom exports as one offline page; an output drawn in a frame of its own
    (Colab) that finds no plotly.js loads it from plotly's CDN.
    """

    def __init__(self, fig: go.Figure, *, embed_plotlyjs: bool) -> None:
        self.figure = go.Figure(fig)
        self.figure.update_layout(template=self.figure.layout.template or TEMPLATE)
        self.embed_plotlyjs = embed_plotlyjs

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        spec = json.loads(pio.to_json(self.figure, validate=False))
        return {
            PLOTLY_MIME: {**spec, "config": CONFIG},
            "text/html": self.html(),
            "text/plain": f"<figure: {self.figure.layout.title.text or 'untitled'}>",
        }

    @property
    def data(self) -> str:
        """The HTML form (what an HTML export shows)."""
        return self.html()

    def html(self) -> str:
        div = f"labkit-{uuid.uuid4().hex}"
        spec = pio.to_json(self.figure, validate=False)
        height = self.figure.layout.height or 450
        script = _DRAW.format(div=div, spec=spec, config=json.dumps(CONFIG), cdn=_cdn_url())
        body = f'<div id="{div}" style="width:100%;height:{height}px"></div><script>{script}</script>'
        return (_embedded_plotlyjs() if self.embed_plotlyjs else "") + body


# Draw with the page's plotly.js; a frame of its own without one fetches it (front ends online).
_DRAW = """(function () {{
  var spec = {spec}, el = document.getElementById("{div}");
  var draw = function () {{ window.Plotly.newPlot(el, spec.data, spec.layout, {config}); }};
  if (window.Plotly) {{ draw(); return; }}
  var s = document.createElement("script");
  s.src = "{cdn}";
  s.onload = draw;
  s.onerror = function () {{
    el.textContent = "This figure needs plotly.js, embedded in the notebook's first figure: " +
      "restart the kernel and run all cells to embed it again.";
  }};
  document.head.appendChild(s);
}})();"""


def _cdn_url() -> str:
    return f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


def _embedded_plotlyjs() -> str:
    # Hide an AMD loader (require.js) for a moment, or plotly.js registers with it and
    # leaves window.Plotly unset.
    return (
        "<script>window.__labkitDefine = window.define; window.define = undefined;</script>"
        f"<script>{get_plotlyjs()}</script>"
        "<script>window.define = window.__labkitDefine;</script>"
    )


def static(fig: go.Figure) -> StaticFigure:
    """A figure as an output that shows without a kernel or a network (see ``StaticFigure``).

    plotly.js is embedded in the first static figure of a kernel only; later ones
    draw with it, as they sit in the same page.
    """
    global _plotlyjs_embedded
    include = not _plotlyjs_embedded
    _plotlyjs_embedded = True
    return StaticFigure(fig, embed_plotlyjs=include)


def show(fig: go.Figure) -> None:
    """Display a finished figure statically (for a plot that does not change).

        show(plots.stage_waterfall(rollout.frame(), turn=3))
    """
    from IPython.display import display

    display(static(fig))
