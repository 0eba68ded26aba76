"""The standard figures, in one module so that every notebook draws from one namespace (``plots``).

Each is a function from DataFrames to a plotly figure, nothing live. Every notebook draws
with these, so a design and a bucket have the same colour everywhere
(``labkit.analysis.style``), axes carry units and titles say what to notice.
``labkit.analysis.live`` redraws them turn by turn.

- ``turn_buckets``: per turn, the API service, inference and the client, stacked
- ``history_growth``: each turn's API time against the history it carried, and the part of it
  spent reading that history
- ``stage_waterfall``: one turn, stage by stage, on its own clock
- ``rollout_gantt``: whole rollouts side by side, every stage as a bar
- ``per_turn``: one metric (TTFT, API time...) each turn, one line per design
- ``race``: time so far against turns, one line per design
- ``stage_tokens``: per turn, the tokens a stage processed, one line per design
- ``design_bars``: end to end and mean TTFT per design
- ``correction_times``: how soon a correction is answered: steered, waited for, or resent

    >>> fig = design_bars(pd.DataFrame({"design": ["naive", "websocket"], "e2e_s": [3.2, 1.8],
    ...                                 "ttft_mean_s": [0.12, 0.06]}))
    >>> [trace.name for trace in fig.data]
    ['end to end (s)', 'mean TTFT (ms)']
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from labkit.analysis.growth import HISTORY_STAGES, history_tokens, stage_ms
from labkit.analysis.metrics import turns
from labkit.analysis.style import (
    BUCKET_COLORS,
    BUCKET_LABELS,
    EXTRA_COLORS,
    design_color,
    design_line,
    layout,
)
from labkit.analysis.style import TEMPLATE as TEMPLATE  # the what-if lab draws with plots.TEMPLATE
from labkit.api.stages import BUCKETS, DEFINITIONS, OBSERVER, bucket_of

MS = 1000
READING_LABEL = f"reading the history ({', '.join(HISTORY_STAGES)})"


def _lines(
    frames: Mapping[str, pd.DataFrame | None], series: Callable[[pd.DataFrame], pd.Series]
) -> list[go.Scatter]:
    """A line per design, from the series each frame gives (empty for a design not run yet)."""
    order = list(frames)
    traces = []
    for name, frame in frames.items():
        points = series(frame) if frame is not None and len(frame) else pd.Series(dtype=float)
        traces.append(design_line(name, list(points.index), list(points), order))
    return traces


# ---------------------------------------------------------------- per turn, one rollout


def turn_buckets(frame: pd.DataFrame | None, title: str = "Where each turn's time goes") -> go.Figure:
    """Stacked bars per turn: API service, inference and client time, in ms."""
    table = turns(frame) if frame is not None and len(frame) else pd.DataFrame(columns=list(BUCKETS))
    fig = go.Figure(
        [
            go.Bar(
                name=BUCKET_LABELS[bucket],
                x=list(table.index),
                y=list(table[bucket] * MS) if bucket in table else [],
                marker_color=BUCKET_COLORS[bucket],
            )
            for bucket in BUCKETS
        ]
    )
    return layout(fig, title, "turn", "time (ms)", barmode="stack", legend_traceorder="normal")


def history_growth(
    frames: Mapping[str, pd.DataFrame | None],
    title: str = "A turn's API time grows with the history it carries",
) -> go.Figure:
    """Per design, each turn's API time (ms) against its prompt's size (tokens), and beneath it,
    dotted, the part of it spent in the stages that read the whole history (``HISTORY_STAGES``)."""

    def by_history(ms: Callable[[pd.DataFrame], pd.Series]) -> Callable[[pd.DataFrame], pd.Series]:
        def series(frame: pd.DataFrame) -> pd.Series:
            both = pd.concat([history_tokens(frame), ms(frame)], axis=1, keys=["history", "ms"])
            return both.dropna().set_index("history")["ms"]

        return series

    whole = _lines(frames, by_history(lambda frame: turns(frame)["api"] * MS))
    reading = _lines(frames, by_history(stage_ms))
    for line in reading:
        line.update(name=f"{line.name}: {READING_LABEL}", line_dash="dot", marker_symbol="circle-open")
    for line in whole:
        line.update(name=f"{line.name}: the whole API time")
    fig = go.Figure([*whole, *reading])
    return layout(fig, title, "history carried (prompt tokens)", "time of the turn (ms)")


def stage_waterfall(frame: pd.DataFrame, turn: int, title: str | None = None) -> go.Figure:
    """One turn's spans, server and client, as bars on the turn's own clock (ms from its send),
    each where it was paid: ``downlink``, the network back to the client, sits before queue and
    prefill, because the server holds the response's first event by it. Hovering a bar shows
    the stage's definition (``labkit.api.stages.DEFINITIONS``)."""
    rows = frame[(frame["turn"] == turn) & (frame["duration"] > 0) & (frame["bucket"] != OBSERVER)]
    send = frame.loc[(frame["turn"] == turn) & (frame["stage"] == "send"), "start"].min()
    rows = rows.sort_values("start")
    labels = [f"{i + 1:02d} {stage}" for i, stage in enumerate(rows["stage"])]
    meanings = ["<br>".join(textwrap.wrap(DEFINITIONS.get(stage, ""), 60)) for stage in rows["stage"]]
    traces = []
    for bucket in BUCKETS:
        mine = list(rows["bucket"] == bucket)
        traces.append(
            go.Bar(
                name=BUCKET_LABELS[bucket],
                y=[label for label, m in zip(labels, mine, strict=True) if m],
                x=list(rows.loc[mine, "duration"] * MS),
                base=list((rows.loc[mine, "start"] - send) * MS),
                customdata=[meaning for meaning, m in zip(meanings, mine, strict=True) if m],
                hovertemplate="%{y}: %{x:.1f} ms, from %{base:.1f} ms<br>%{customdata}<extra></extra>",
                orientation="h",
                marker_color=BUCKET_COLORS[bucket],
            )
        )
    fig = go.Figure(traces)
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    title = title or f"Turn {turn}, stage by stage"
    return layout(fig, title, "ms since the client sent the request", "", height=40 + 22 * max(len(rows), 8))


# ---------------------------------------------------------------- several rollouts side by side


def rollout_gantt(
    frames: Mapping[str, pd.DataFrame | None], title: str = "Whole rollouts, stage by stage"
) -> go.Figure:
    """Every span of each rollout on one time axis (s from its first send), a row per design."""
    traces = []
    for bucket in BUCKETS:
        x, base, y, text = [], [], [], []
        for name, frame in frames.items():
            if frame is None or not len(frame):
                continue
            rows = frame[(frame["bucket"] == bucket) & (frame["duration"] > 0)]
            x += list(rows["duration"])
            base += list(rows["t"])
            y += [name] * len(rows)
            text += [f"turn {t}: {s}" for t, s in zip(rows["turn"], rows["stage"], strict=True)]
        traces.append(
            go.Bar(
                name=BUCKET_LABELS[bucket],
                x=x,
                base=base,
                y=y,
                hovertext=text,
                orientation="h",
                marker_color=BUCKET_COLORS[bucket],
                marker_line_width=0,
            )
        )
    fig = go.Figure(traces)
    fig.update_yaxes(categoryorder="array", categoryarray=list(frames)[::-1])
    return layout(fig, title, "seconds since the rollout's first request", "", barmode="overlay")


def per_turn(
    frames: Mapping[str, pd.DataFrame | None],
    metric: str = "ttft",
    title: str = "Time to first token, turn by turn",
    unit: str = "ms",
) -> go.Figure:
    """Per design, one column of ``metrics.turns`` (``ttft``, ``api``, ``wall``...) each turn."""
    scale = MS if unit == "ms" else 1
    traces = _lines(frames, lambda frame: turns(frame)[metric].dropna() * scale)
    return layout(go.Figure(traces), title, "turn", f"{metric} ({unit})")


def race(frames: Mapping[str, pd.DataFrame | None], title: str = "Time so far, turn by turn") -> go.Figure:
    """Per design, the rollout's time up to the end of each turn (s): the steeper, the slower."""
    traces = _lines(frames, lambda frame: turns(frame)["wall"].cumsum())
    return layout(go.Figure(traces), title, "turn", "time so far (s)")


def stage_tokens(
    frames: Mapping[str, pd.DataFrame | None], stage: str, title: str | None = None
) -> go.Figure:
    """Per design, the tokens one stage processed each turn (``input_safety``, ``render``, ...)."""

    def work(frame: pd.DataFrame) -> pd.Series:
        rows = frame[(frame["source"] == "server") & (frame["stage"] == stage)]
        return rows.groupby("turn")["tokens"].sum()

    traces = _lines(frames, work)
    title = title or f"Tokens the {stage} stage processed, per turn"
    return layout(go.Figure(traces), title, "turn", "tokens")


def design_bars(table: pd.DataFrame, title: str = "End to end and time to first token") -> go.Figure:
    """Per design (rows of ``table``: ``design``, ``e2e_s``, ``ttft_mean_s``): two bar groups."""
    names = list(table["design"]) if len(table) else []
    colors = [design_color(n, names) for n in names]
    fig = go.Figure(
        [
            go.Bar(name="end to end (s)", x=names, y=list(table.get("e2e_s", [])), marker_color=colors),
            go.Bar(
                name="mean TTFT (ms)",
                x=names,
                y=[v * MS for v in table.get("ttft_mean_s", [])],
                marker_color=colors,
                marker_pattern_shape="/",
                yaxis="y2",
                offsetgroup=1,
            ),
        ]
    )
    fig.update_traces(offsetgroup=0, selector={"name": "end to end (s)"})
    return layout(
        fig,
        title,
        "design",
        "end to end (s)",
        yaxis2={"title": "mean TTFT (ms)", "overlaying": "y", "side": "right", "rangemode": "tozero"},
        barmode="group",
    )


def correction_times(
    runs: pd.DataFrame | None, title: str = "From a user's correction to the first token that answers it"
) -> go.Figure:
    """Per way of correcting a model mid-answer (rows of ``runs``: ``strategy``, ``tps``,
    ``seconds``, as ``labkit.client.steering`` measures them), a bar per speed: the median run's
    milliseconds, on a log axis (waiting for a long answer takes seconds, steering tens of ms)."""
    table = runs if runs is not None and len(runs) else pd.DataFrame(columns=["strategy", "tps", "seconds"])
    order = ["steer", "wait", "resend"]
    bars = []
    for index, (speed, group) in enumerate(table.groupby("tps", sort=True)):
        medians = group.groupby("strategy")["seconds"].median().reindex(order).dropna()
        bars.append(
            go.Bar(
                name=f"{speed:,} tokens/s",
                x=list(medians.index),
                y=[v * MS for v in medians],
                text=[f"{v * MS:,.0f} ms" for v in medians],
                marker_color=EXTRA_COLORS[index % len(EXTRA_COLORS)],
            )
        )
    fig = go.Figure(bars)
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    return layout(fig, title, "how the correction reaches the model", "ms (log scale)", yaxis_type="log",
                  barmode="group")


def trace_timeline(traces: Sequence[Mapping], title: str = "Responses as the server ran them") -> go.Figure:
    """Finished responses (from the live traces stream), a row each, their spans as bars on the
    server's clock (s since the first one shown), coloured by bucket."""
    rows = []
    for trace in traces:
        parts = (trace.get("owner"), trace["design"], trace["response_id"][-6:])
        label = " · ".join(str(part) for part in parts if part)
        rows += [{"label": label, **span} for span in trace["spans"]]
    spans = pd.DataFrame(rows, columns=["label", "stage", "start", "end"])
    origin = spans["start"].min() if len(spans) else 0.0
    traces_out = []
    for bucket in BUCKETS:
        mine = spans[spans["stage"].map(bucket_of) == bucket] if len(spans) else spans
        traces_out.append(
            go.Bar(
                name=BUCKET_LABELS[bucket],
                y=list(mine["label"]),
                x=list(mine["end"] - mine["start"]),
                base=list(mine["start"] - origin),
                hovertext=list(mine["stage"]),
                orientation="h",
                marker_color=BUCKET_COLORS[bucket],
                marker_line_width=0,
            )
        )
    fig = go.Figure(traces_out)
    labels = list(dict.fromkeys(spans["label"]))
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    height = 120 + 24 * max(len(labels), 6)
    return layout(fig, title, "seconds since the first response shown", "", barmode="overlay", height=height)


# ---------------------------------------------------------------- what-ifs (labkit.analysis.whatif)


def prediction_bars(
    predicted: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = "Predicted for every design"
) -> go.Figure:
    """End to end (left) and mean TTFT (right) per design, predicted as bars; measured points,
    when there are any, as diamonds on top."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("end to end (s)", "mean TTFT (ms)"))
    names = list(predicted["design"])
    colors = [design_color(n, names) for n in names]
    got = measured if measured is not None else pd.DataFrame(columns=["design", "e2e_s", "ttft_mean_s"])
    for col, (metric, scale) in enumerate((("e2e_s", 1), ("ttft_mean_s", MS)), start=1):
        fig.add_trace(
            go.Bar(
                name="predicted",
                x=names,
                y=list(predicted[metric] * scale),
                marker_color=colors,
                showlegend=col == 1,
                legendgroup="predicted",
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                name="measured",
                x=list(got["design"]),
                y=list(got[metric] * scale),
                mode="markers",
                marker={"symbol": "diamond", "size": 13, "color": "black"},
                showlegend=col == 1,
                legendgroup="measured",
            ),
            row=1,
            col=col,
        )
    return layout(fig, title, "", "")


def stage_breakdown(table: pd.DataFrame, design: str) -> go.Figure:
    """One design's seconds per stage over the rollout (``whatif.breakdown``), coloured by bucket."""
    traces = []
    for bucket in BUCKETS:
        rows = table[table["bucket"] == bucket]
        traces.append(
            go.Bar(
                name=BUCKET_LABELS[bucket],
                y=list(rows["stage"]),
                x=list(rows["seconds"]),
                orientation="h",
                marker_color=BUCKET_COLORS[bucket],
            )
        )
    fig = go.Figure(traces)
    fig.update_yaxes(categoryorder="array", categoryarray=list(table["stage"])[::-1])
    title = f"Where {design}'s time goes, stage by stage"
    return layout(fig, title, "seconds over the rollout", "", height=460)


def saving_curve(
    curve: pd.DataFrame,
    current_tps: float,
    current_saving: float,
    baseline: str = "naive",
    design: str = "websocket",
) -> go.Figure:
    """A design's saving against ``baseline`` across decode speeds (log scale), the current point
    marked (``curve``: ``labkit.analysis.whatif.saving_by_speed``), under a title that names no outcome."""
    color = design_color(design)
    fig = go.Figure(
        [
            go.Scatter(
                name=f"{design}'s saving",
                x=list(curve["decode_tps"]),
                y=list(curve["saving"]),
                mode="lines",
                line={"color": color, "width": 3},
            ),
            go.Scatter(
                name="these settings",
                x=[current_tps],
                y=[current_saving],
                mode="markers",
                marker={"size": 14, "color": "black", "symbol": "x"},
            ),
        ]
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    title = f"{design}'s saving against {baseline}, across decode speeds"
    return layout(fig, title, "decode speed (tokens/s)", f"saved vs {baseline}")
