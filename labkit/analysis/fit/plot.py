"""Fits side by side as a figure: each figure's residual under each fit, held-out ones hatched.

Notebook 08 draws the fit to OpenAI's two figures beside the fit to all five.

    >>> from labkit.analysis.fit.result import fit_articles
    >>> fig = residual_bars({"OpenAI's two": fit_articles(), "all five": fit_articles(figures="all")})
    >>> [trace.name for trace in fig.data]
    ["OpenAI's two", 'all five']
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from labkit.analysis.fit.result import ArticleFit
from labkit.analysis.style import EXTRA_COLORS, TEMPLATE

WITHIN = 5  # points: the band drawn around zero


def residual_bars(fits: Mapping[str, ArticleFit], title: str = "Each figure's residual, by fit") -> go.Figure:
    """One group of bars per published figure, one bar per fit (points: the fit's outcome minus
    the figure); a figure a fit holds out is hatched. The band is ±5 points."""
    fig = go.Figure()
    for i, (name, fit) in enumerate(fits.items()):
        table = fit.residuals
        labels = [f"{figure} ({who})" for figure, who in zip(table.index, table["who"], strict=True)]
        fig.add_trace(
            go.Bar(
                name=name,
                x=labels,
                y=list(table["residual (points)"]),
                marker={
                    "color": EXTRA_COLORS[i % len(EXTRA_COLORS)],
                    "pattern": {"shape": ["/" if role == "held out" else "" for role in table["role"]]},
                },
                customdata=list(table["role"]),
                hovertemplate="%{x}: %{y:+.1f} points (%{customdata})<extra>" + name + "</extra>",
            )
        )
    fig.add_hrect(y0=-WITHIN, y1=WITHIN, fillcolor="#59a14f", opacity=0.12, line_width=0)
    fig.add_hline(y=0, line_color="black", line_width=1)
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title + " (hatched: held out; band: within 5 points)", "x": 0.01},
        yaxis_title="fit's outcome − figure (points)",
        barmode="group",
        legend={"orientation": "h", "y": -0.3},
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        height=420,
    )
    return fig
