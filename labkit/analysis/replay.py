"""``labkit replay``: a recorded session played again through every design, at any model speed.

The recording (a Codex CLI session or a transcript, see ``labkit.scenarios.replay``) becomes a
replay scenario in a temporary folder; ``labkit.analysis.compare`` then runs it as it runs any
scenario, on a server that finds the replay's steps there.

    result = replay(Path("data/replays/codex-websocket.jsonl"), tps=(65, 1000))
    result.table        # one row per (speed, design), as `labkit compare` has them
    result.recorded     # one row per recorded turn: its calls, tool-output sizes and usage

``price`` answers the same question at once, from the cost model: the recording's shape
(``Shape.of`` on the replay scenario) priced for every design at every speed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from labkit.analysis.compare import Row, model_near, rows_json, run_designs
from labkit.analysis.cost_model import CpuCosts, Shape, predict
from labkit.analysis.saving import saved_column, share_saved, ttft_cut_column
from labkit.designs import DESIGNS
from labkit.engine.catalogue import REPLAY_MODELS, builtin_speeds, load_catalogue
from labkit.paths import DATA_ENV, builtin_data_dir, default_data_dir
from labkit.profiles import DEFAULT_PROFILE, load_profile
from labkit.scenarios.replay import Replay, load_replay

DEFAULT_REPLAY_TPS = builtin_speeds(REPLAY_MODELS)
REPLAYS = builtin_data_dir() / "replays"  # the recorded sessions labkit ships
# A replayed session resends what it recorded: real histories outgrow the room-sized defaults.
BODY_LIMIT = str(256 * 1024 * 1024)
SAVED, TTFT_CUT = saved_column("naive"), ttft_cut_column("naive")  # the columns of a priced replay


@dataclass
class ReplayResult:
    """What ``replay`` measured, and what the recording said."""

    replay: Replay
    rows: list[Row]

    @property
    def table(self) -> pd.DataFrame:
        """One row per (speed, design): end to end, mean TTFT, API share, saved against naive."""
        return pd.DataFrame(rows_json(self.rows))

    @property
    def recorded(self) -> pd.DataFrame:
        return recorded_frame(self.replay)


def recorded_frame(replay: Replay) -> pd.DataFrame:
    """The recording's own numbers, one row per turn (usage columns empty where none was recorded)."""
    rows = []
    for t in replay.turns:
        usage = t.usage
        rows.append(
            {
                "turn": t.turn,
                "line": t.line,
                "calls": ", ".join(t.calls),
                "tool_output_chars": sum(t.tool_output_chars),
                "input_tokens": usage.input_tokens if usage else None,
                "cached_tokens": usage.cached_tokens if usage else None,
                "output_tokens": usage.output_tokens if usage else None,
                "reasoning_tokens": usage.reasoning_tokens if usage else None,
            }
        )
    return pd.DataFrame(rows).set_index("turn")


def describe(replay: Replay) -> str:
    """One line about the recording, e.g. ``codex-websocket.jsonl: a Codex CLI 0.171.0 session, 4 turns``."""
    kind = f"a Codex CLI {replay.version} session" if replay.format == "codex" else "a transcript"
    calls = sum(len(t.calls) for t in replay.turns)
    line = f"{replay.source.name}: {kind}, {len(replay.turns)} turns, {calls} tool calls replayed"
    if replay.truncated_at is not None:
        line += f"; only its first task (a second begins on line {replay.truncated_at})"
    if replay.closing_turn:
        line += "; it ends on a tool call, so a one-token answer closes it"
    return line


def replay(
    source: Path,
    *,
    tps: Sequence[float] = DEFAULT_REPLAY_TPS,
    designs: Sequence[str] = tuple(DESIGNS),
    repeat: int = 1,
    profile: str = DEFAULT_PROFILE,
    progress: Callable[[str], None] | None = None,
) -> ReplayResult:
    """Replay a recorded session through every design at every speed (``ReplayError`` if unreadable).

        result = replay(Path("data/replays/codex-websocket.jsonl"), tps=(1000,))
        result.table        # one row per speed and design, as ``labkit compare`` prints
        result.recorded     # the file's own turns and token counts
    """
    with tempfile.TemporaryDirectory(prefix="labkit-replay-") as tmp:
        recording = load_replay(Path(source), Path(tmp))
        if progress:
            progress(describe(recording))
        rows = run_designs(
            tps=tps,
            scenario=recording.scenario,
            profile=profile,
            repeat=repeat,
            designs=designs,
            progress=progress,
            server_args=["--max-body-bytes", BODY_LIMIT, "--max-frame-bytes", BODY_LIMIT],
            server_env={DATA_ENV: tmp},
        )
    return ReplayResult(recording, rows)


# ---------------------------------------------------------------- the cost model's answer, at once


@dataclass
class PricedReplay:
    """What the cost model predicts for a recording: ``table`` has ``replay``'s columns."""

    replay: Replay
    table: pd.DataFrame


def price(
    source: Path,
    *,
    cpu: CpuCosts,
    tps: Sequence[float] = DEFAULT_REPLAY_TPS,
    designs: Sequence[str] = tuple(DESIGNS),
    profile: str = DEFAULT_PROFILE,
) -> PricedReplay:
    """The cost model's table for a recording, in well under a second: one row per (speed,
    design) with ``e2e_s``, ``ttft_mean_s``, ``saved_vs_naive`` and ``ttft_cut_vs_naive``,
    as ``replay(...).table`` has them. Speeds take the prefill speed of the nearest catalogue
    model, as ``labkit replay`` does. ``ReplayError`` if the file cannot be replayed.

    >>> priced = price(REPLAYS / "codex-websocket.jsonl", cpu=CpuCosts(), tps=(1000,))
    >>> list(priced.table["design"]), len(priced.replay.turns)
    (['naive', 'sprint', 'websocket', 'appended'], 4)
    """
    with tempfile.TemporaryDirectory(prefix="labkit-replay-") as tmp:
        recording = load_replay(Path(source), Path(tmp))
        shape = Shape.of(recording.scenario)  # the recorded tool outputs are read back from tmp
    catalogue, loaded = load_catalogue(), load_profile(profile, default_data_dir())
    rows = []
    for speed in tps:
        prefill = model_near(speed, catalogue).prefill_tps
        priced = {
            d: predict(d, loaded, shape, decode_tps=speed, prefill_tps=prefill, cpu=cpu) for d in designs
        }
        base = priced.get("naive")
        for design, costs in priced.items():
            rows.append(
                {
                    "design": design,
                    "tps": float(speed),
                    "e2e_s": costs.end_to_end,
                    "ttft_mean_s": costs.mean_ttft,
                    SAVED: share_saved(costs.end_to_end, base.end_to_end if base else None),
                    TTFT_CUT: share_saved(costs.mean_ttft, base.mean_ttft if base else None),
                    "turns": len(costs),
                }
            )
    return PricedReplay(recording, pd.DataFrame(rows))
