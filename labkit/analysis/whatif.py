"""What-ifs: settings in, DataFrames out. The cost model's prediction for every design, and the
real measurement of the same point, with nothing but plain functions.

A ``Settings`` is a point in the space a learner explores: the model's speeds,
the network and each service hop, the classifiers' cost, the shape of the
rollout (turns, output per turn, tool output, instructions, tool time), and two
things about the world outside the designs: how much slower this machine's CPU
would be (``cpu_factor``) and how often a WebSocket client loses its connection
(``reconnect_rate``). ``predict`` prices it for every design instantly;
``measure`` starts a real server with a profile and a model built from the same
settings, runs a synthetic rollout of that shape under each design (a WebSocket
client dropping its socket on the reconnect turns), and returns what it measured.
``labkit.analysis.whatif_ui`` is only widgets around these.

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
import itertools
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from labkit.analysis.cost_model import CpuCosts, Prediction, Shape
from labkit.analysis.cost_model import predict as price
from labkit.analysis.metrics import summary
from labkit.analysis.tables import E2E, TTFT, saved
from labkit.api.stages import bucket_of
from labkit.client.agent import DEFAULT_MODEL
from labkit.designs import DESIGNS
from labkit.engine.catalogue import load_catalogue
from labkit.paths import builtin_data_dir
from labkit.profiles import DEFAULT_PROFILE, Profile, load_profile, profile_toml
from labkit.scenarios import DEFAULT_SCENARIO, SYNTHETIC_DEFAULTS, load_scenario, synthetic

MODEL = "labkit-whatif"
# The defaults' sources: the profile, the model, and the scripted task's number of turns.
_PROFILE = load_profile(DEFAULT_PROFILE, builtin_data_dir())
_FAST_MODEL = load_catalogue().resolve(DEFAULT_MODEL)
_SCRIPTED_TURNS = load_scenario(DEFAULT_SCENARIO, builtin_data_dir()).turns


@dataclass(frozen=True)
class Settings:
    """One what-if point. Times in ms, speeds in tokens/s, sizes in tokens. The defaults are the
    ``production-like`` profile's, the fast coding model's (``DEFAULT_MODEL``), the scripted task's
    number of turns and a synthetic scenario's sizes (``SYNTHETIC_DEFAULTS``)."""

    decode_tps: float = _FAST_MODEL.decode_tps
    prefill_tps: float = _FAST_MODEL.prefill_tps
    rtt_ms: float = float(_PROFILE.network.rtt_ms)
    auth_ms: float = float(_PROFILE.auth.hop_ms)
    model_config_ms: float = float(_PROFILE.routing.model_config_hop_ms)
    intermediary_ms: float = float(_PROFILE.intermediary.hop_ms)
    billing_ms: float = float(_PROFILE.billing.hop_ms)
    classifier_ms_per_1k: float = float(_PROFILE.safety.ms_per_1k_tokens)
    fast_classifier_ms_per_1k: float = float(_PROFILE.safety.fast_ms_per_1k_tokens)
    turns: int = _SCRIPTED_TURNS
    output_tokens: int = SYNTHETIC_DEFAULTS["output_tokens"]  # each turn's: a short call or a short answer
    tool_tokens: int = SYNTHETIC_DEFAULTS["tool_tokens"]
    instruction_tokens: int = SYNTHETIC_DEFAULTS["instruction_tokens"]
    tool_ms: float = 0.0  # how long the client's tool takes each turn
    cpu_factor: float = 1.0  # this machine's CPU costs times this: 2 is a laptop twice as slow
    reconnect_rate: float = 0.0  # the share of WebSocket turns that find the connection gone

    def profile(self, base: Profile | None = None) -> Profile:
        """The latency profile these settings describe (the rest from ``production-like``)."""
        base = base or _PROFILE
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
        sizes = (self.turns, self.output_tokens, self.tool_tokens, self.instruction_tokens)
        return synthetic(*sizes).name

    def shape(self) -> Shape:
        """The rollout's sizes, with the client's tool time on every turn that calls a tool."""
        measured = _shape(self.turns, self.output_tokens, self.tool_tokens, self.instruction_tokens)
        seconds = self.tool_ms / 1000
        last = len(measured.turns) - 1
        turns = [replace(t, tool_s=seconds if i < last else 0.0) for i, t in enumerate(measured.turns)]
        return Shape(measured.system_tokens, tuple(turns))

    def cpu(self, measured: CpuCosts) -> CpuCosts:
        """The CPU costs these settings price with: this machine's, times ``cpu_factor``."""
        return measured.scaled(self.cpu_factor)

    def reconnects(self) -> frozenset[int]:
        """The turns on which a WebSocket client reconnects (see ``reconnect_turns``)."""
        return reconnect_turns(self.turns, self.reconnect_rate)

    def model_only(self) -> list[str]:
        """The settings moved away from what a real run here can realise (see ``MODEL_ONLY``).

        >>> Settings(cpu_factor=2).model_only(), Settings(turns=5).model_only()
        (['cpu_factor'], [])
        """
        return [name for name in MODEL_ONLY if getattr(self, name) != getattr(_REALISED, name)]


@functools.cache
def _shape(turns: int, output_tokens: int, tool_tokens: int, instruction_tokens: int) -> Shape:
    return Shape.of(synthetic(turns, output_tokens, tool_tokens, instruction_tokens))


# Settings the cost model prices but a run cannot realise: the CPU is this machine's. A point is
# measured only where they are at their defaults. (Reconnects are realised: the client drops its
# socket before the turns ``reconnect_turns`` names.)
MODEL_ONLY = ("cpu_factor",)
_REALISED = Settings()


def reconnect_turns(turns: int, rate: float) -> frozenset[int]:
    """The turns (0-based) whose connection cache is missed at ``rate``: spread evenly over the
    turns after the first (the first opens the socket anyway), ``floor((turns - 1) * rate)`` of them.

    >>> sorted(reconnect_turns(9, 0.5)), sorted(reconnect_turns(5, 1.0)), reconnect_turns(5, 0.0)
    ([2, 4, 6, 8], [1, 2, 3, 4], frozenset())
    """
    if not 0 <= rate <= 1:
        raise ValueError(f"a reconnect rate is a share of turns, from 0 to 1, not {rate}")

    def due(t: int) -> int:  # reconnects due by turn t (rounded, so 0.3 * 10 counts as 3)
        return math.floor(round(t * rate, 9))

    return frozenset(t for t in range(1, turns) if due(t) > due(t - 1))


# The three speeds the articles name, from the model catalogue.
_PRESET_MODELS = {
    "GPT-5-era model": "labkit-classic",
    "fast coding model": "labkit-spark",
    "bursts": "labkit-burst",
}


def _presets() -> dict[str, Settings]:
    catalogue, presets = load_catalogue(), {}
    for label, model in _PRESET_MODELS.items():
        spec = catalogue.resolve(model)
        speeds = {"decode_tps": spec.decode_tps, "prefill_tps": spec.prefill_tps}
        presets[f"{label} ({spec.decode_tps:,.0f} tokens/s)"] = Settings(**speeds)
    return presets


PRESETS: dict[str, Settings] = _presets()

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
    "output_tokens": (10, 2000, 10),
    "tool_tokens": (0, 5000, 50),
    "instruction_tokens": (0, 20_000, 500),
    "tool_ms": (0, 500, 5),
    "cpu_factor": (0.5, 5, 0.1),
    "reconnect_rate": (0, 1, 0.05),
}
assert set(RANGES) == {f.name for f in fields(Settings)}, "every setting has a range"

# What a saving is measured against: the design before any work, or the HTTP API after the sprint.
BASELINES = ("naive", "sprint")


def saving_column(baseline: str) -> str:
    """The column of ``predict``'s table that holds the saving against ``baseline``.

    >>> saving_column("sprint")
    'saved_vs_sprint'
    """
    if baseline not in BASELINES:
        raise ValueError(f"a saving is against one of {', '.join(BASELINES)}, not {baseline!r}")
    return f"saved_vs_{baseline}"


# ---------------------------------------------------------------- predictions


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
            table[saving_column(baseline)] = 1 - table["e2e_s"] / e2e[baseline]
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


def breakdown(settings: Settings, design: str, cpu: CpuCosts) -> pd.DataFrame:
    """One design's predicted seconds per stage over the whole rollout: ``stage, bucket, seconds``."""
    table = _price(settings, design, cpu).frame().groupby("stage", sort=False)["seconds"].sum().reset_index()
    table["bucket"] = table["stage"].map(bucket_of)
    return table[["stage", "bucket", "seconds"]]


def saving_curve(
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


# ---------------------------------------------------------------- the saving, mechanism by mechanism


class Mechanism(NamedTuple):
    label: str  # the article's words for it
    design: str  # the design with it and every mechanism before it (a composed spec)
    part_of: str  # the named design it belongs to


# The sprint's three changes, then the socket's (its connection cache, and the billing it lets
# overlap), each switched on over the ones before it. The third is the sprint, the last WebSocket mode.
MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("cached rendered tokens + model config", "naive+render_cache+model_config_cache", "sprint"),
    Mechanism("no intermediary hop", "naive+render_cache+model_config_cache+no_intermediary", "sprint"),
    Mechanism("fast classifiers", "sprint", "sprint"),
    Mechanism("connection cache", "sprint+connection_cache", "websocket"),
    Mechanism("overlapped billing", "websocket", "websocket"),
)


def mechanism_savings(settings: Settings, cpu: CpuCosts, baseline: str = "naive") -> pd.DataFrame:
    """What each mechanism after ``baseline`` saves, added one at a time in the articles' order:
    ``mechanism, design, part_of, e2e_s`` (with it and those before it), ``saved_s`` (the seconds it
    takes off) and ``saving`` (as a share of the baseline's end to end). The rows add up to the
    saving of WebSocket mode against the baseline. A mechanism's share depends on the ones before it
    (a classifier that scans less history saves less), so the order is the articles'.

    >>> table = mechanism_savings(PRESETS["fast coding model (1,000 tokens/s)"], CpuCosts(), "sprint")
    >>> list(table["mechanism"])
    ['connection cache', 'overlapped billing']
    """
    saving_column(baseline)  # a known baseline
    designs = [m.design for m in MECHANISMS]
    steps = MECHANISMS[designs.index(baseline) + 1 :] if baseline in designs else MECHANISMS
    chain = [baseline, *(m.design for m in steps)]
    e2e = predict(settings, cpu, chain).set_index("design")["e2e_s"]
    table = pd.DataFrame(
        {
            "mechanism": [m.label for m in steps],
            "design": [m.design for m in steps],
            "part_of": [m.part_of for m in steps],
        }
    )
    table["e2e_s"] = [e2e[design] for design in chain[1:]]
    table["saved_s"] = [e2e[before] - e2e[after] for before, after in itertools.pairwise(chain)]
    table["saving"] = table["saved_s"] / e2e[baseline]
    return table


# ---------------------------------------------------------------- tables with units


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


def mechanism_table(mechanisms: pd.DataFrame, baseline: str = "naive") -> pd.DataFrame:
    """``mechanism_savings`` for people: per mechanism, the seconds it saves and its share."""
    rows = mechanisms.set_index("mechanism")
    return pd.DataFrame(
        {"part of": rows["part_of"], "saved (s)": rows["saved_s"], saved(baseline): rows["saving"]}
    )


# ---------------------------------------------------------------- measurements


def measure(
    settings: Settings,
    designs: Sequence[str] = tuple(DESIGNS),
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """Run the point for real: a server with these settings' profile and model, one synthetic
    rollout of this shape per design. ``progress(done, total, what)`` is called along the way.

    Returns per design ``e2e_s`` and ``ttft_mean_s``, as ``labkit.analysis.metrics`` measures them.
    A point with a model-only setting moved (``Settings.model_only``) is refused: no run here
    realises it, so nothing measured would be that point.
    """
    from labkit.client.agent import Rollout
    from labkit.client.launcher import LabkitServer

    if moved := settings.model_only():
        raise ValueError(f"{', '.join(moved)}: the cost model's only; set them back to measure this point")
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
                    server.base_url,
                    design,
                    settings.scenario_name,
                    model=MODEL,
                    tool_seconds=tool_seconds,
                    reconnects=settings.reconnects(),
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


def comparison_table(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """``against`` for people: per design, end to end and mean TTFT, predicted and measured, and
    how far the model was off (a share: +10% is a prediction 10% above the measurement)."""
    both = against(predicted, measured).set_index("design")
    return pd.DataFrame(
        {
            "end to end, predicted (s)": both["e2e_s_predicted"],
            "end to end, measured (s)": both["e2e_s_measured"],
            "end to end, model off by": both["e2e_s_error"],
            "mean TTFT, predicted (ms)": both["ttft_mean_s_predicted"] * 1000,
            "mean TTFT, measured (ms)": both["ttft_mean_s_measured"] * 1000,
            "mean TTFT, model off by": both["ttft_mean_s_error"],
        }
    )
