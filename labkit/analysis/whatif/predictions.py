"""A what-if point priced by the cost model, instantly: every design, one design's stages, the
saving across decode speeds, and the table for people."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from labkit.analysis.cost_model import CpuCosts, Prediction, Shape
from labkit.analysis.cost_model import predict as price
from labkit.analysis.saving import share_saved
from labkit.analysis.tables import E2E, TTFT, saved
from labkit.analysis.whatif.as_run import run_frame
from labkit.analysis.whatif.settings import BASELINES, RANGES, Settings, saving_column
from labkit.api.stages import bucket_of
from labkit.designs import DESIGNS
from labkit.profiles import Profile


def predict(settings: Settings, cpu: CpuCosts, designs: Sequence[str] = tuple(DESIGNS)) -> pd.DataFrame:
    """Per design: ``e2e_s``, ``ttft_mean_s``, the ``api_s``, ``inference_s``, ``client_s`` the
    rollout spends, and the saving against each baseline among ``designs`` (``saved_vs_naive``,
    ``saved_vs_sprint``). ``cpu``: this machine's costs (``settings.cpu_factor`` scales them)."""
    profile, shape = settings.profile(), settings.shape()
    rows = []
    for design in designs:
        costs = _price(settings, design, cpu, profile, shape)
        buckets = costs.frame().groupby("bucket")["seconds"].sum()
        rows.append(
            {
                "design": design,
                "e2e_s": costs.end_to_end,
                "ttft_mean_s": costs.mean_ttft,
                "api_s": buckets.get("api", 0.0),
                "inference_s": buckets.get("inference", 0.0),
                "client_s": buckets.get("client", 0.0),
            }
        )
    table = pd.DataFrame(rows)
    e2e = table.set_index("design")["e2e_s"]
    for baseline in BASELINES:
        if baseline in e2e:
            table[saving_column(baseline)] = share_saved(table["e2e_s"], e2e[baseline])
    return table


def _price(
    settings: Settings, design: str, cpu: CpuCosts, profile: Profile | None = None, shape: Shape | None = None
) -> Prediction:
    return price(
        design,
        profile or settings.profile(),
        shape or settings.shape(),
        decode_tps=settings.decode_tps,
        prefill_tps=settings.prefill_tps,
        cpu=settings.cpu(cpu),
        reconnects=settings.reconnects(),
    )


def predicted_rollouts(settings: Settings, cpu: CpuCosts, designs: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Each design's predicted rollout laid out as a measured one's frame (``as_run.run_frame``), so
    ``labkit.analysis.paired.saving`` compares two predictions turn by turn as it does two runs.

    >>> from labkit.analysis.paired import saving
    >>> both = predicted_rollouts(Settings(turns=4), CpuCosts(), ["sprint", "websocket"])
    >>> saving(both["sprint"], both["websocket"], column="wall").ms > 0
    True
    """
    shape = settings.shape()
    return {design: run_frame(_price(settings, design, cpu, shape=shape), shape) for design in designs}


def breakdown(settings: Settings, design: str, cpu: CpuCosts) -> pd.DataFrame:
    """One design's predicted seconds per stage over the whole rollout: ``stage, bucket, seconds``."""
    table = _price(settings, design, cpu).frame().groupby("stage", sort=False)["seconds"].sum().reset_index()
    table["bucket"] = table["stage"].map(bucket_of)
    return table[["stage", "bucket", "seconds"]]


def saving_by_speed(
    settings: Settings,
    cpu: CpuCosts,
    speeds: Sequence[float] | None = None,
    design: str = "websocket",
    baseline: str = "naive",
) -> pd.DataFrame:
    """A design's predicted saving against ``baseline`` (end to end) at each decode speed, the rest fixed."""
    low, high, _ = RANGES["decode_tps"]
    speeds = speeds if speeds is not None else np.geomspace(low, high, 25)
    rows = []
    for tps in speeds:
        table = predict(replace(settings, decode_tps=float(tps)), cpu, (baseline, design)).set_index("design")
        rows.append({"decode_tps": float(tps), "saving": float(table.loc[design, saving_column(baseline)])})
    return pd.DataFrame(rows)


def speed_where_saving_falls_below(curve: pd.DataFrame, threshold: float) -> float | None:
    """The slowest decode speed at which the saving reaches ``threshold`` (interpolated), or None."""
    above = curve[curve["saving"] >= threshold]
    if above.empty:
        return None
    first = above.index[0]
    if first == curve.index[0]:
        return float(curve.loc[first, "decode_tps"])
    lo, hi = curve.loc[first - 1], curve.loc[first]
    fraction = (threshold - lo["saving"]) / (hi["saving"] - lo["saving"])
    log_lo, log_hi = np.log(lo["decode_tps"]), np.log(hi["decode_tps"])
    return float(np.exp(log_lo + fraction * (log_hi - log_lo)))


def prediction_table(predicted: pd.DataFrame, baseline: str = "naive") -> pd.DataFrame:
    """``predict``'s table for people: one row per design, each column named with its unit
    (show it with ``labkit.analysis.tables.styled``)."""
    rows = predicted.set_index("design")
    return pd.DataFrame(
        {
            E2E: rows["e2e_s"],
            saved(baseline): rows[saving_column(baseline)],
            TTFT: rows["ttft_mean_s"] * 1000,
            "API service (s)": rows["api_s"],
            "inference (s)": rows["inference_s"],
            "client (s)": rows["client_s"],
        }
    )
