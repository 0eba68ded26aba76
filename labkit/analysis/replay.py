"""``labkit replay``: a recorded session played again through every design, at any model speed.

The recording (a Codex CLI session or a transcript, see ``labkit.scenarios.replay``) becomes a
replay scenario in a temporary folder; ``labkit.analysis.compare`` then runs it as it runs any
scenario, on a server that finds the replay's steps there.

    result = replay(Path("data/replays/codex-websocket.jsonl"), tps=(65, 1000))
    result.table        # one row per (speed, design), as `labkit compare` has them
    result.recorded     # one row per recorded turn: its calls, tool-output sizes and usage
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from labkit.analysis.compare import Row, compare, rows_json
from labkit.designs import DESIGNS
from labkit.paths import DATA_ENV
from labkit.scenarios.replay import Replay, load_replay
from labkit.server.profiles import DEFAULT_PROFILE

DEFAULT_REPLAY_TPS = (65, 1000)
# A replayed session resends what it recorded: real histories outgrow the room-sized defaults.
BODY_LIMIT = str(256 * 1024 * 1024)


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
        rows = compare(
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
