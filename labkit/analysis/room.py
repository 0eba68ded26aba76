"""A workshop room at a glance, from the live trace stream: who is active, what ran, how each design did.

An instructor's key on ``/v1/labkit/traces/stream`` receives every learner's finished responses
(``labkit.client.trace_watch``). Each function here turns the traces received so far into one
table or one figure, so a dashboard (notebook 07) only watches and redraws:

- ``learner_turns``: a row per turn (a response, or one sampling segment of an appended rollout)
- ``rollouts``: a row per rollout, with its end to end
- ``learners``: a row per learner: their name, responses, rollouts, designs, models, last seen
- ``by_design``: TTFT and end to end per design, across the room
- ``comparison``: the designs compared in words, once there are two to compare
- ``room_figure``: turns per learner, and each design's median TTFT and end to end
- ``watch_room``: the stream, the room's history first, handed to a redraw at most once a second
- ``label_of``: the label a key's traffic carries, for an instructor who holds the keys
- ``who_is_who``: a row per label seen or key handed out: the names given, whom it was handed to

A learner is the label of their key (``learner-3f9a1c``: a digest, never the key), with the
name they gave (``$LABKIT_NAME``, sent by labkit's clients as ``metadata.labkit_name``) beside it.

Times are the server's, from its spans (one monotonic clock for every worker on a machine):

- a turn's TTFT runs from its first span (the server meeting the request, the modelled network
  included) to its first output token (its decode span's start plus one token at the pace of
  that decode), so it is the client's TTFT without the real network;
- a rollout is the responses that share a ``session`` (their ``prompt_cache_key``, as labkit's
  agent sends it), else a chain of ``previous_response_id``; its end to end runs from its first
  span to its last, the client's tools between turns included.

    >>> span = {"stage": "decode", "start": 1.0, "end": 1.5, "tokens": 50, "segment": 0}
    >>> trace = {"response_id": "resp_1", "design": "naive", "model": "m", "status": "completed",
    ...          "spans": [{"stage": "uplink", "start": 0.9, "end": 0.95, "tokens": 0, "segment": 0}, span]}
    >>> row = learner_turns([trace]).iloc[0]
    >>> row["learner"], row["name"], round(float(row["ttft_s"]), 3), round(float(row["wall_s"]), 3)
    ('you', None, 0.11, 0.6)
"""

from __future__ import annotations

import asyncio
import html
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from labkit.analysis.style import DESIGN_COLORS, TEMPLATE, design_color
from labkit.api.owners import key_label
from labkit.api.stages import Stage
from labkit.client.trace_watch import TraceWatcher

Trace = Mapping[str, Any]
YOU = "you"  # the learner of traces without an owner label: the watching key's own
REDRAW_EVERY_S = 1.0  # a room finishes many responses a second; the kernel redraws once a second

TURN_COLUMNS = [
    "learner",
    "name",
    "response_id",
    "design",
    "model",
    "status",
    "turn",
    "start",
    "end",
    "ttft_s",
]
ROLLOUT_COLUMNS = ["learner", "name", "rollout", "design", "model", "responses", "turns", "start", "e2e_s"]
LEARNER_COLUMNS = [
    "name",
    "responses",
    "rollouts",
    "turns",
    "designs",
    "models",
    "failed",
    "last_seen",
    "idle_s",
]
WHO_COLUMNS = ["name they gave", "handed to", "responses"]
DESIGN_COLUMNS = ["learners", "rollouts", "turns", "ttft_p50_ms", "ttft_p90_ms", "e2e_p50_s", "e2e_p90_s"]


def learner_of(trace: Trace) -> str:
    """The trace's learner label (``owner``, as an instructor sees it), else ``you``."""
    return str(trace.get("owner") or YOU)


def label_of(key: str) -> str:
    """The label an instructor sees for a key's traffic: for the one who handed out the keys.

    >>> label_of("sk-room-ada") == label_of("sk-room-ada") != label_of("sk-room-bo")
    True
    """
    return key_label(key)


def who_is_who(traces: Sequence[Trace], handed_out: Mapping[str, str] | None = None) -> pd.DataFrame:
    """A row per label: each one the traces show (in the order first seen), then each key in
    ``handed_out`` (name -> key, as the instructor handed them out) not seen yet. ``name they
    gave``: the names its responses carried; ``handed to``: whom that key went to; ``responses``:
    how many have finished. Empty text where nothing is known, never NaN.

    >>> ada = {"response_id": "r1", "owner": label_of("sk-a"), "name": "Ada", "spans": []}
    >>> who_is_who([ada], {"Ada L.": "sk-a", "Bo": "sk-b"}).values.tolist()
    [['Ada', 'Ada L.', 1], ['', 'Bo', 0]]
    """
    handed = {label_of(key): name for name, key in (handed_out or {}).items()}
    seen = pd.DataFrame({"learner": [learner_of(t) for t in traces], "name": [t.get("name") for t in traces]})
    per = seen.groupby("learner", sort=False)["name"]
    table = pd.DataFrame({"name they gave": per.agg(_names), "responses": per.size()})
    table = table.reindex([*table.index, *(label for label in handed if label not in table.index)])
    table["handed to"] = [handed.get(label, "") for label in table.index]
    table = table.fillna({"name they gave": "", "responses": 0}).astype({"responses": int})
    return table[WHO_COLUMNS].rename_axis("learner")


def learner_turns(traces: Sequence[Trace]) -> pd.DataFrame:
    """A row per turn: ``learner``, ``name`` (the learner's own, or None), ``response_id``,
    ``design``, ``model``, ``status``, ``turn`` (the sampling segment), ``start`` and ``end``
    (server clock, s), ``ttft_s`` (NaN for a turn that sampled nothing) and ``wall_s``."""
    rows = []
    for trace in traces:
        segments: dict[int, list[Mapping[str, Any]]] = {}
        for span in trace["spans"]:
            segments.setdefault(int(span.get("segment", 0)), []).append(span)
        for segment, spans in sorted(segments.items()):
            # A span beside the critical path (a steer's crossing before its response began) is
            # not where the turn started.
            on_path = [span for span in spans if not span.get("detail", {}).get("overlapped")] or spans
            start = min(span["start"] for span in on_path)
            decode = next((s for s in spans if s["stage"] == Stage.DECODE and s["tokens"]), None)
            first_token = (
                decode["start"] + (decode["end"] - decode["start"]) / decode["tokens"] if decode else None
            )
            rows.append(
                {
                    "learner": learner_of(trace),
                    "name": trace.get("name"),
                    "response_id": trace["response_id"],
                    "design": trace["design"],
                    "model": trace.get("model"),
                    "status": trace.get("status"),
                    "turn": segment,
                    "start": start,
                    "end": max(span["end"] for span in spans),
                    "ttft_s": first_token - start if first_token is not None else float("nan"),
                }
            )
    frame = pd.DataFrame(rows, columns=TURN_COLUMNS)
    frame["wall_s"] = frame["end"] - frame["start"]
    return frame


def rollout_of(traces: Sequence[Trace]) -> dict[str, str]:
    """Each response's rollout: its ``session``, else the first response of its chain.

    >>> rollout_of([{"response_id": "a"}, {"response_id": "b", "previous_response_id": "a"},
    ...             {"response_id": "c", "session": "session-1"}])
    {'a': 'a', 'b': 'a', 'c': 'session-1'}
    """
    parents = {t["response_id"]: t.get("previous_response_id") for t in traces}
    found = {}
    for trace in traces:
        root = trace["response_id"]
        for _ in range(len(parents)):  # bounded: a chain is at most every response seen
            parent = parents.get(root)
            if parent is None or parent not in parents:
                break
            root = parent
        found[trace["response_id"]] = trace.get("session") or root
    return found


def rollouts(traces: Sequence[Trace]) -> pd.DataFrame:
    """A row per rollout, in the order they began: ``learner``, ``name``, ``rollout``, ``design``, ``model``,
    ``responses``, ``turns``, ``start`` (server clock, s) and ``e2e_s`` (so far, for one running)."""
    table = learner_turns(traces)
    if table.empty:
        return pd.DataFrame(columns=ROLLOUT_COLUMNS)
    table["rollout"] = table["response_id"].map(rollout_of(traces))
    grouped = table.groupby(["learner", "rollout"], sort=False).agg(
        name=("name", "first"),  # the first name given (a rollout's requests all carry the same)
        design=("design", "first"),
        model=("model", "first"),
        responses=("response_id", "nunique"),
        turns=("turn", "size"),
        start=("start", "min"),
        end=("end", "max"),
    )
    grouped["e2e_s"] = grouped["end"] - grouped["start"]
    grouped["name"] = grouped["name"].fillna("")
    return grouped.reset_index().sort_values("start", kind="stable")[ROLLOUT_COLUMNS].reset_index(drop=True)


def learners(traces: Sequence[Trace], now: float | None = None) -> pd.DataFrame:
    """Who is active: a row per learner, the most recently seen first. ``name``: the names their
    responses carried (empty if none); ``last_seen``: the time of day their last response
    finished, ``idle_s`` the seconds since (``now``: the wall clock)."""
    runs = rollouts(traces)
    if runs.empty:
        return pd.DataFrame(columns=LEARNER_COLUMNS).rename_axis("learner")
    now = time.time() if now is None else now
    seen = pd.DataFrame(
        {
            "learner": [learner_of(t) for t in traces],
            "finished_at": [t.get("finished_at", float("nan")) for t in traces],
            "failed": [t.get("status") not in ("completed", "incomplete") for t in traces],
        }
    ).groupby("learner")
    table = runs.groupby("learner").agg(
        name=("name", _names),
        responses=("responses", "sum"),
        rollouts=("rollout", "size"),
        turns=("turns", "sum"),
        designs=("design", _names),
        models=("model", _names),
    )
    table["failed"] = seen["failed"].sum()
    last = seen["finished_at"].max()
    table["last_seen"] = last.map(lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t == t else "")
    table["idle_s"] = (now - last).clip(lower=0)
    return table.sort_values("idle_s", kind="stable")[LEARNER_COLUMNS]


def by_design(traces: Sequence[Trace]) -> pd.DataFrame:
    """Per design, across the room: ``learners``, ``rollouts``, ``turns``, the turns' TTFT
    (median and 90th percentile, ms) and the rollouts' end to end (median and 90th percentile, s).
    Rows in the story's order (naive, sprint, websocket, appended), then any other design."""
    table, runs = learner_turns(traces), rollouts(traces)
    if table.empty:
        return pd.DataFrame(columns=DESIGN_COLUMNS).rename_axis("design")
    per_turn = table.groupby("design")["ttft_s"]
    per_rollout = runs.groupby("design")
    out = pd.DataFrame(
        {
            "learners": per_rollout["learner"].nunique(),
            "rollouts": per_rollout.size(),
            "turns": table.groupby("design").size(),
            "ttft_p50_ms": per_turn.median() * 1000,
            "ttft_p90_ms": per_turn.quantile(0.9) * 1000,
            "e2e_p50_s": per_rollout["e2e_s"].median(),
            "e2e_p90_s": per_rollout["e2e_s"].quantile(0.9),
        }
    )
    order = [d for d in DESIGN_COLORS if d in out.index] + sorted(set(out.index) - set(DESIGN_COLORS))
    return out.loc[order].rename_axis("design")


def comparison(traces: Sequence[Trace]) -> str:
    """The designs compared in words: the median TTFT of the quickest and the slowest design, and
    each design's rollouts end to end, saying which designs' rollouts overlap (those the room
    cannot rank). It needs two designs with a first token; until then it says what it waits for.

    >>> comparison([])
    'No turn has reached its first token yet: the comparison waits for the first responses.'
    """
    designs = by_design(traces).dropna(subset=["ttft_p50_ms"])
    if designs.empty:
        return "No turn has reached its first token yet: the comparison waits for the first responses."
    ttft = designs["ttft_p50_ms"]
    if len(designs) == 1:
        design, row = ttft.index[0], designs.iloc[0]
        return (
            f"Only {design} so far ({_count(row['rollouts'], 'rollout')} from "
            f"{_count(row['learners'], 'learner')}, median TTFT {ttft.iloc[0]:.0f} ms): a comparison "
            "needs a second design, and waits for a learner to run one."
        )
    quick, slow = ttft.idxmin(), ttft.idxmax()
    if ttft[quick] == ttft[slow]:
        lines = [f"Median TTFT: every design {ttft[quick]:.0f} ms."]
    else:
        turns_of = designs["turns"]
        lines = [
            f"Median TTFT: {quick} {ttft[quick]:.0f} ms over {_count(turns_of[quick], 'turn')}, "
            f"{slow} {ttft[slow]:.0f} ms over {_count(turns_of[slow], 'turn')}; "
            f"{slow} waits {ttft[slow] / ttft[quick]:.1f}x as long for its first token."
        ]
    ends = rollouts(traces).groupby("design")["e2e_s"].agg(["median", "min", "max", "size"])
    ends = ends.loc[[d for d in designs.index if d in ends.index]]
    lines.append("End to end per rollout, median (quickest to slowest):")
    width = max(len(d) for d in ends.index)
    for design, e in ends.iterrows():
        spread = f"{e['min']:.2f} to {e['max']:.2f}, {_count(e['size'], 'rollout')}"
        lines.append(f"  {design:<{width}}  {e['median']:.2f} s ({spread})")
    ranked = ends.sort_values("median").iterrows()  # neighbours by median: do their ranges meet?
    overlaps = [f"{a} and {b}" for (a, lo), (b, hi) in itertools.pairwise(ranked) if hi["min"] <= lo["max"]]
    if overlaps:
        lines.append(f"Overlapping end to end, so not ranked by these rollouts: {'; '.join(overlaps)}.")
    return "\n".join(lines)


def _count(n: float, what: str) -> str:
    return f"{int(n)} {what}" + ("" if int(n) == 1 else "s")


def _names(values: pd.Series) -> str:
    """The distinct values, sorted and joined; none (None, NaN or empty) is left out."""
    return ", ".join(sorted({str(v) for v in values if pd.notna(v) and v != ""}))


def _who(label: str, name: str) -> str:
    """A learner as the figure shows them: the name they gave, then the label."""
    return f"{html.escape(name)} · {label}" if name else label


def room_figure(traces: Sequence[Trace], title: str = "The room, live") -> go.Figure:
    """Three panels: turns per learner (stacked by design), each design's median TTFT (ms), and
    its median rollout end to end (s). Turns, not responses: an appended rollout is one response."""
    runs, designs = rollouts(traces), by_design(traces)
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.44, 0.28, 0.28],
        horizontal_spacing=0.09,
        subplot_titles=("turns per learner", "median TTFT (ms)", "median end to end (s)"),
    )
    order = list(designs.index)
    colors = [design_color(d, order) for d in order]
    # The design panels' bars come first and every property is set: a live redraw updates the
    # figure's traces by position, and a design seen for the first time only adds one at the end.
    for col, column in ((2, "ttft_p50_ms"), (3, "e2e_p50_s")):
        bars = go.Bar(name=column, x=order, y=list(designs[column]), marker_color=colors, showlegend=False)
        fig.add_trace(bars, row=1, col=col)
    per_learner = runs.pivot_table(index="learner", columns="design", values="turns", aggfunc="sum")
    names = runs.groupby("learner")["name"].agg(_names) if not runs.empty else pd.Series(dtype=str)
    for design in order:
        counts = per_learner[design].fillna(0) if design in per_learner else pd.Series(dtype=float)
        bars = go.Bar(
            name=design,
            x=[_who(label, names.get(label, "")) for label in counts.index],
            y=list(counts),
            marker_color=design_color(design, order),
            showlegend=True,
        )
        fig.add_trace(bars, row=1, col=1)
    learners_seen = runs["learner"].nunique()
    fig.update_layout(
        template=TEMPLATE,
        title={"text": f"{title}: {learners_seen} learners, {len(traces)} responses", "y": 0.97},
        barmode="stack",
        height=400,
        margin={"l": 50, "r": 20, "t": 110, "b": 60},
        legend={
            "orientation": "h",
            "traceorder": "normal",
            "x": 1,
            "xanchor": "right",
            "y": 1.2,
            "yanchor": "bottom",
        },
    )
    return fig


def watch_room(
    base_url: str,
    api_key: str,
    on_change: Callable[[list[dict[str, Any]]], None],
    every: float = REDRAW_EVERY_S,
    *,
    history: bool = True,
) -> TraceWatcher:
    """Subscribe to the trace stream and call ``on_change(traces so far)`` at most once every
    ``every`` seconds, on the notebook's event loop (so it runs while no cell does); outside a
    running loop, at every trace. With ``history`` (the default) the traces start with the
    finished responses the server keeps, so a dashboard opened late shows the room since it
    began; it returns once they have arrived.

        watcher = watch_room(server.base_url, INSTRUCTOR, lambda traces: plot.update(traces))
        ...
        watcher.stop()
    """
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    received: list[dict[str, Any]] = []
    pending = False

    def redraw() -> None:
        nonlocal pending
        pending = False
        on_change(list(received))

    def schedule() -> None:
        nonlocal pending
        if not pending and loop is not None:
            pending = True
            loop.call_later(every, redraw)

    def on_trace(trace: dict[str, Any]) -> None:
        received.append(trace)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(schedule)
        else:
            on_change(list(received))

    return TraceWatcher(base_url, api_key, on_trace, history=history).start()
