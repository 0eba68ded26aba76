"""A what-if point: the settings a learner moves, their defaults (read from the profile, the model
catalogue and the scripted task), their ranges, the presets, and the baselines a saving is against."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields, replace

from labkit.analysis.cost_model import CpuCosts, Shape
from labkit.analysis.saving import saved_column
from labkit.client.agent import DEFAULT_MODEL
from labkit.engine.catalogue import load_catalogue
from labkit.paths import builtin_data_dir
from labkit.profiles import DEFAULT_PROFILE, Profile, load_profile
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
    return saved_column(baseline)
