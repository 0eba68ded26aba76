"""The what-if lab's own figures: the saving split by mechanism, and the saving across decode speeds
against the chosen baseline (the standard figures are ``labkit.analysis.plots``)."""

from __future__ import annotations

import textwrap

import pandas as pd
import plotly.graph_objects as go

from labkit.analysis import plots
from labkit.analysis.style import LEGEND_ABOVE, layout


def mechanism_bars(table: pd.DataFrame, baseline: str) -> go.Figure:
    """``whatif.mechanism_savings`` as bars: the seconds each mechanism takes off, in the order
    added, coloured by the design it belongs to; its share of the baseline's end to end on top."""
    traces = []
    for design, rows in table.groupby("part_of", sort=False):
        traces.append(
            go.Bar(
                name=f"part of {design}",
                x=list(rows["mechanism"]),
                y=list(rows["saved_s"]),
                text=[f"{share:.0%}" for share in rows["saving"]],
                textposition="outside",
                marker_color=plots.design_color(str(design)),
            )
        )
    fig = go.Figure(traces)
    labels = list(table["mechanism"])
    wrapped = ["<br>".join(textwrap.wrap(label, 16)) for label in labels]  # level labels, a few lines each
    fig.update_xaxes(categoryorder="array", categoryarray=labels, tickangle=0)
    fig.update_xaxes(tickvals=labels, ticktext=wrapped)
    return layout(
        fig,
        f"What each mechanism saves, added in order (share of {baseline} on top)",
        "mechanism, in the order added",
        "seconds saved over the rollout",
        legend=LEGEND_ABOVE,
        margin={"l": 60, "r": 20, "t": 80, "b": 90},
        height=420,
    )
