"""A what-if point measured for real: a server built from its settings, one synthetic rollout per
design, and the measurement set beside the cost model's prediction."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from labkit.analysis.metrics import summary
from labkit.analysis.whatif.settings import MODEL, Settings
from labkit.designs import DESIGNS
from labkit.profiles import profile_toml


def measure(
    settings: Settings,
    designs: Sequence[str] = tuple(DESIGNS),
    progress: Callable[[int, int, str], None] | None = None,
) -> pd.DataFrame:
    """Run the point for real (``measure_rollouts``) and return per design ``e2e_s`` and
    ``ttft_mean_s``, as ``labkit.analysis.metrics`` measures them (``measured_table``).
    A point with a model-only setting moved (``Settings.model_only``) is refused: no run here
    realises it, so nothing measured would be that point."""
    return measured_table(measure_rollouts(settings, designs, progress))


def measure_rollouts(
    settings: Settings,
    designs: Sequence[str] = tuple(DESIGNS),
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, pd.DataFrame]:
    """Run the point for real: a server with these settings' profile and model, one synthetic
    rollout of this shape per design, the designs taking turns turn by turn. Returns each
    design's rollout frame, which ``labkit.analysis.paired.saving`` compares turn by turn.
    ``progress(done, total, what)`` is called along the way.

        frames = measure_rollouts(replace(Settings(), turns=8), ["sprint", "websocket"])
        saving(frames["sprint"], frames["websocket"], column="wall").ms_shown()   # e.g. '23 ± 2 ms'
    """
    from labkit.client.agent import take_turns
    from labkit.client.launcher import LabkitServer

    if moved := settings.model_only():
        raise ValueError(f"{', '.join(moved)}: the cost model's only; set them back to measure this point")
    total = settings.turns + 1
    say = progress or (lambda done, total, what: None)
    with tempfile.TemporaryDirectory(prefix="labkit-whatif-") as tmp:
        profile_file, models_file = Path(tmp) / "what-if.toml", Path(tmp) / "models.toml"
        profile_file.write_text(profile_toml(settings.profile()))
        models_file.write_text(
            f'[models."{MODEL}"]\ndecode_tps = {settings.decode_tps}\nprefill_tps = {settings.prefill_tps}\n'
        )
        say(0, total, "starting a server with these settings")
        args = ["--profile", str(profile_file), "--models", str(models_file)]
        with LabkitServer(args=args, db=Path(tmp) / "responses.sqlite3") as server:
            # The designs take turns, turn by turn: a machine that gets busier meanwhile touches all alike.
            rounds = take_turns(
                server.base_url,
                list(designs),
                settings.scenario_name,
                model=MODEL,
                tool_seconds=settings.tool_ms / 1000,
                reconnects=settings.reconnects(),
            )
            for done, played in enumerate(rounds, start=1):
                say(min(done, total - 1), total, f"turn {done} of every design")
                rollouts = played
        frames = {design: rollout.frame() for design, rollout in rollouts.items()}
        say(total, total, "done")
    return frames


def measured_table(frames: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per design, ``e2e_s`` and ``ttft_mean_s`` of its measured rollout (``metrics.summary``).

        measured_table(measure_rollouts(settings))   # design, e2e_s, ttft_mean_s: one row each
    """
    rows = []
    for design, frame in frames.items():
        result = summary(frame)
        rows.append({"design": design, **{k: result[k] for k in ("e2e_s", "ttft_mean_s")}})
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
            "end to end, model off by (%)": both["e2e_s_error"],
            "mean TTFT, predicted (ms)": both["ttft_mean_s_predicted"] * 1000,
            "mean TTFT, measured (ms)": both["ttft_mean_s_measured"] * 1000,
            "mean TTFT, model off by (%)": both["ttft_mean_s_error"],
        }
    )


# Two designs the model puts closer than this are not ordered by one short measured run: on a
# shared 2-core machine one 8-turn run's end to end moves by several percent on its own.
CLEARLY_APART = 0.10


@dataclass(frozen=True)
class Ordering:
    """Whether a measurement orders the designs as the model does, pair by pair, for the pairs the
    model puts ``CLEARLY_APART``; the closer pairs are listed, not judged.

        >>> p = pd.Series({"naive": 2.0, "websocket": 1.2, "appended": 1.15})
        >>> m = pd.Series({"naive": 2.6, "websocket": 1.30, "appended": 1.31})
        >>> o = Ordering.of(p, m)
        >>> o.holds, o.close
        (True, [('appended', 'websocket')])
        >>> Ordering.of(p, pd.Series({"naive": 1.2, "websocket": 1.3, "appended": 1.25})).holds
        False
    """

    clear: list[tuple[str, str]]  # (faster, slower) by the model, at least CLEARLY_APART
    agreed: list[tuple[str, str]]  # those the measurement orders the same way
    close: list[tuple[str, str]]  # (faster, slower) by the model, closer than CLEARLY_APART

    @classmethod
    def of(cls, predicted: pd.Series, measured: pd.Series, apart: float = CLEARLY_APART) -> Ordering:
        """``predicted`` and ``measured``: end to end per design (the same designs)."""
        ranked = list(predicted.sort_values().index)
        pairs = [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1 :]]
        clear = [(a, b) for a, b in pairs if predicted[a] <= predicted[b] * (1 - apart)]
        return cls(
            clear=clear,
            agreed=[(a, b) for a, b in clear if measured[a] < measured[b]],
            close=[pair for pair in pairs if pair not in clear],
        )

    @property
    def holds(self) -> bool:
        return len(self.agreed) == len(self.clear)

    def evidence(self, measured: pd.Series) -> str:
        """One line: how many clear pairs agreed, and how the close ones measured."""
        said = f"{len(self.agreed)} of {len(self.clear)} pairs the model puts {CLEARLY_APART:.0%} apart"
        wrong = [f"{a} < {b}" for a, b in self.clear if (a, b) not in self.agreed]
        if wrong:
            said += f" (measured the other way: {', '.join(wrong)})"
        for a, b in self.close:
            said += f"; {a} and {b}, closer in the model, measured {measured[b] / measured[a] - 1:+.0%} apart"
        return said
