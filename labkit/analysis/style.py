"""How labkit's figures look: one colour per design and per bucket, one template, one layout.

A design and a bucket have the same colour in every figure (``labkit.analysis.plots``, the
live plots, the room's dashboard, the what-if lab):

>>> design_color("websocket"), BUCKET_COLORS["api"]
('#4e79a7', '#e15759')
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

BUCKET_COLORS = {"api": "#e15759", "inference": "#4e79a7", "client": "#edc948"}
BUCKET_LABELS = {"api": "API service", "inference": "inference", "client": "client (tools, request)"}
DESIGN_COLORS = {"naive": "#7f7f7f", "sprint": "#f28e2b", "websocket": "#4e79a7", "appended": "#59a14f"}
# Lines of designs that often coincide (naive and sprint scan alike) stay apart by their dash.
DESIGN_DASHES = {"naive": "solid", "sprint": "dash", "websocket": "solid", "appended": "dot"}
# For designs beyond the four (a composed spec, a model speed): a fixed cycle, in order of first use.
EXTRA_COLORS = ("#b07aa1", "#9c755f", "#76b7b2", "#ff9da7", "#edc948", "#bab0ac", "#e15759")
TEMPLATE = "plotly_white"
# plotly's default template is labkit's: a figure takes the default almost for free, where naming
# a template on each figure copied it every time (tens of ms a redraw, every turn of a live plot).
pio.templates.default = TEMPLATE
# A legend in one row at the top right, above the plot (where bars leave no room below).
LEGEND_ABOVE = {"orientation": "h", "y": 1.0, "x": 1.0, "xanchor": "right", "yanchor": "bottom"}


def design_color(name: str, order: Sequence[str] = ()) -> str:
    """The colour of a design: its own for the four, else by its place in ``order``.

    >>> design_color("websocket"), design_color("naive+render_cache", ["naive", "naive+render_cache"])
    ('#4e79a7', '#9c755f')
    """
    if name in DESIGN_COLORS:
        return DESIGN_COLORS[name]
    index = list(order).index(name) if name in order else len(order)
    return EXTRA_COLORS[index % len(EXTRA_COLORS)]


def design_line(name: str, x: list, y: list, order: Sequence[str]) -> go.Scatter:
    """A design's line: its colour, its dash, markers on the points."""
    color = design_color(name, order)
    return go.Scatter(
        name=name,
        x=x,
        y=y,
        mode="lines+markers",
        line={"color": color, "dash": DESIGN_DASHES.get(name, "solid"), "width": 2.5},
        marker_color=color,
    )


def layout(fig: go.Figure, title: str, x: str, y: str, **more: object) -> go.Figure:
    """``fig`` laid out as every labkit figure is: labkit's template (plotly's default since this
    module loaded), a title at the left, axis titles, the legend below; ``more`` overrides (a
    height, a bar mode)."""
    settings: dict[str, object] = {
        "title": {"text": title, "x": 0.01},
        "xaxis_title": x,
        "yaxis_title": y,
        "legend": {"orientation": "h", "y": -0.2},
        "margin": {"l": 60, "r": 20, "t": 60, "b": 60},
        "height": 380,
    }
    fig.update_layout(**{**settings, **more})
    return fig
