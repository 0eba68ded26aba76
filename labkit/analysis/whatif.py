"""What-ifs: settings in, DataFrames out. The cost model's prediction for every design, and the
real measurement of the same point, with nothing but plain functions.

A ``Settings`` is a point in the space a learner explores: the model's speeds,
the network and each service hop, the classifiers' cost, and the shape of the
rollout (turns, tool output, instructions, tool time). ``predict`` prices it
for every design instantly; ``measure`` starts a real server with a profile and
a model built from the same settings, runs a synthetic rollout of that shape
under each design, and returns what it measured. ``labkit.analysis.whatif_ui``
is only widgets around these.

    >>> point = PRESETS["fast coding model (1,000 tokens/s)"]
    >>> table = predict(point, cpu=CpuCosts())
    >>> list(table["design"])
    ['naive', 'sprint', 'websocket', 'appended']
    >>> e2e = table.set_index("design")["e2e_s"]
    >>> bool(e2e["websocket"] < e2e["sprint"] < e2e["naive"])
    True
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.analysis.cost_model import CpuCosts, Prediction, Shape
from labkit.analysis.cost_model import predict as price
from labkit.analysis.metrics import summary
from labkit.api.stages import bucket_of
from labkit.designs import DESIGNS
from labkit.paths import builtin_data_dir
from labkit.scenarios import synthetic
from labkit.server.profiles import DEFAULT_PROFILE, Profile, load_profile, profile_toml

MODEL = "labkit-whatif"
OUTPUT_TOKENS = 60  # each turn's sampled output: a short call or a short answer


@dataclass(frozen=True)
class Settings:
    """One what-if point. Times in ms, speeds in tokens/s, sizes in tokens."""

    decode_tps: float = 1000.0
    prefill_tps: float = 50_000.0
    rtt_ms: float = 20.0
    auth_ms: float = 6.0
    model_config_ms: float = 8.0
    intermediary_ms: float = 12.0
    billing_ms: float = 10.0
    classifier_ms_per_1k: float = 1.0
    fast_classifier_ms_per_1k: float = 0.3
    turns: int = 19
    tool_tokens: int = 1000
    instruction_tokens: int = 8000
    tool_ms: float = 0.0  # how long the client's tool takes each turn

    def profile(self, base: Profile | None = None) -> Profile:
        """The latency profile these settings describe (the rest from ``production-like``)."""
        base = base or load_profile(DEFAULT_PROFILE, builtin_data_dir())
        return replace(
            base,
            name="what-if",
            network=replace(base.network, rtt_ms=self.rtt_ms),
            auth=replace(base.auth, hop_ms=self.auth_ms),
            safety=replace(
                base.safety,
                ms_per_1k_tokens=self.classifier_ms_per_1k,
                fast_ms_per_1k_tokens=self.fast_classifier_ms_per_1k,
            ),
            routing=replace(base.routing, model_config_hop_ms=self.model_config_ms),
            intermediary=replace(base.intermediary, hop_ms=self.intermediary_ms),
            billing=replace(base.billing, hop_ms=self.billing_ms),
        )

    @property
    def scenario_name(self) -> str:
        """The synthetic scenario of this shape, as the server and the client name it."""
        return synthetic(self.turns, OUTPUT_TOKENS, self.tool_tokens, self.instruction_tokens).name

    def shape(self) -> Shape:
        """The rollout's sizes, with the client's tool time on every turn that calls a tool."""
        measured = _shape(self.turns, self.tool_tokens, self.instruction_tokens)
        seconds = self.tool_ms / 1000
        last = len(measured.turns) - 1
        turns = [replace(t, tool_s=seconds if i < last else 0.0) for i, t in enumerate(measured.turns)]
        return Shape(measured.system_tokens, tuple(turns))


@functools.cache
def _shape(turns: int, tool_tokens: int, instruction_tokens: int) -> Shape:
    return Shape.of(synthetic(turns, OUTPUT_TOKENS, tool_tokens, instruction_tokens))


PRESETS: dict[str, Settings] = {
    "GPT-5-era model (65 tokens/s)": Settings(decode_tps=65, prefill_tps=10_000),
    "fast coding model (1,000 tokens/s)": Settings(),
    "bursts (4,000 tokens/s)": Settings(decode_tps=4000, prefill_tps=100_000),
}

# The range of each setting a learner can move, for widgets: (low, high, step).
RANGES: dict[str, tuple[float, float, float]] = {
    "decode_tps": (65, 4000, 0),  # step 0: a log scale
    "prefill_tps": (5_000, 200_000, 0),
    "rtt_ms": (0, 100, 1),
    "auth_ms": (0, 30, 0.5),
    "model_config_ms": (0, 30, 0.5),
    "intermediary_ms": (0, 30, 0.5),
    "billing_ms": (0, 30, 0.5),
    "classifier_ms_per_1k": (0, 10, 0.1),
    "fast_classifier_ms_per_1k": (0, 10, 0.1),
    "turns": (2, 60, 1),
    "tool_tokens": (0, 5000, 50),
    "instruction_tokens": (0, 20_000, 500),
    "tool_ms": (0, 500, 5),
}
assert set(RANGES) == {f.name for f in fields(Settings)}, "every setting has a range"


# ---------------------------------------------------------------- predictions


def predict(settings: Settings, cpu: CpuCosts, designs: Sequence[str] = tuple(DESIGNS)) -> pd.DataFrame:
    """Per design: ``e2e_s``, ``ttft_mean_s``, ``saved_vs_naive`` and the ``api_s``,
    ``inference_s``, ``client_s`` the rollout spends."""
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
    naive = table.loc[table["design"] == "naive", "e2e_s"]
    table["saved_vs_naive"] = 1 - table["e2e_s"] / naive.iloc[0] if len(naive) else np.nan
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
        cpu=cpu,
    )


def breakdown(settings: Settings, design: str, cpu: CpuCosts) -> pd.DataFrame:
    """One design's predicted seconds per stage over the whole rollout: ``stage, bucket, seconds``."""
    table = _price(settings, design, cpu).frame().groupby("stage", sort=False)["seconds"].sum().reset_index()
    table["bucket"] = table["stage"].map(bucket_of)
    return table[["stage", "bucket", "seconds"]]


def saving_curve(
    settings: Settings, cpu: CpuCosts, speeds: Sequence[float] | None = None, design: str = "websocket"
) -> pd.DataFrame:
    """A design's predicted saving against naive (end to end) at each decode speed, the rest fixed."""
    low, high, _ = RANGES["decode_tps"]
    speeds = speeds if speeds is not None else np.geomspace(low, high, 25)
    rows = []
    for tps in speeds:
        table = predict(replace(settings, decode_tps=float(tps)), cpu, ("naive", design)).set_index("design")
        rows.append({"decode_tps": float(tps), "saving": float(table.loc[design, "saved_vs_naive"])})
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


# ---------------------------------------------------------------- measurements


def measure(
    settings: Settings,
    designs: Sequence[str] = tuple(DESIGNS),
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """Run the point for real: a server with these settings' profile and model, one synthetic
    rollout of this shape per design. ``progress(done, total, what)`` is called along the way.

    Returns per design ``e2e_s`` and ``ttft_mean_s``, as ``labkit.analysis.metrics`` measures them.
    """
    from labkit.client.agent import Rollout
    from labkit.server.handle import LabkitServer

    total = len(designs) + 1
    say = progress or (lambda done, total, what: None)
    with tempfile.TemporaryDirectory(prefix="labkit-whatif-") as tmp:
        profile_file, models_file = Path(tmp) / "what-if.toml", Path(tmp) / "models.toml"
        profile_file.write_text(profile_toml(settings.profile()))
        models_file.write_text(
            f'[models."{MODEL}"]\ndecode_tps = {settings.decode_tps}\nprefill_tps = {settings.prefill_tps}\n'
        )
        say(0, total, "starting a server with these settings")
        args = ["--profile", str(profile_file), "--models", str(models_file)]
        rows = []
        with LabkitServer(args=args, db=Path(tmp) / "responses.sqlite3") as server:
            for done, design in enumerate(designs, start=1):
                say(done, total, f"running {design}")
                tool_seconds = settings.tool_ms / 1000
                rollout = Rollout.run(
                    server.base_url, design, settings.scenario_name, model=MODEL, tool_seconds=tool_seconds
                )
                result = summary(rollout.frame())
                rows.append({"design": design, **{k: result[k] for k in ("e2e_s", "ttft_mean_s")}})
        say(total, total, "done")
    return pd.DataFrame(rows)


def against(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Prediction and measurement side by side per design, with the model's error in percent."""
    both = predicted.merge(measured, on="design", suffixes=("_predicted", "_measured"))
    for metric in ("e2e_s", "ttft_mean_s"):
        both[f"{metric}_error"] = both[f"{metric}_predicted"] / both[f"{metric}_measured"] - 1
    kinds = ("predicted", "measured", "error")
    columns = ["design"] + [f"{m}_{k}" for m in ("e2e_s", "ttft_mean_s") for k in kinds]
    return both[columns]
