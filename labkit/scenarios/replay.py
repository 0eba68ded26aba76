"""Replay scenarios: a recorded agent session, read as a stream, played again on any design.

Two recordings are read (the format is told by the file's first character): a Codex CLI
session (``labkit.scenarios.codex_session``) and a transcript (``labkit.scenarios.transcript``).

A replay keeps the recording's turns: the first request's instructions (developer and system
messages folded in), its user messages (as one), its tool definitions, each turn's calls
(name and arguments) and message text as recorded, and each call's output, which the client
returns instead of running a tool. The model's hidden reasoning (``reasoning_tokens``) is
decoded as a message of that many tokens at the head of its turn, since labkit's model has no
hidden tokens. A Codex session does not record its tool definitions: the replay offers the
tools the session called plus one whose description makes the first turn's prompt as long as
its recorded ``input_tokens``.

Only the recording's first task is replayed: a user message after the model has answered
starts a second one (``Replay.truncated_at`` is its line). A recording that ends on a tool call
gets one closing answer of one token, since a rollout ends on an answer.

The file is read line by line (a transcript one pair at a time); the tool outputs go to a file
the client reads back one at a time, so a long session is never held in memory whole.

    replay = load_replay(Path("data/replays/codex-websocket.jsonl"), Path(tmp))
    replay.scenario.turns, replay.turns[0].usage
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from labkit.engine.render import GENERATION_PROMPT, encode_rendered, render_conversation
from labkit.scenarios import SCENARIO_NAME, Scenario
from labkit.scenarios.codex_session import CodexSession
from labkit.scenarios.recording import Opening, ReplayError, Usage
from labkit.scenarios.transcript import CHUNK, Transcript
from labkit.text.passage import text_of_tokens
from labkit.text.tokenizer import encode_text

PADDING_TOOL = "unrecorded_tools"  # stands for the tool definitions a Codex session does not record


@dataclass(frozen=True, slots=True)  # one per turn is kept: small, for long sessions
class TurnSummary:
    """A replayed turn's recorded sizes, kept for comparison (the texts are not)."""

    turn: int
    line: int
    calls: tuple[str, ...]
    tool_output_chars: tuple[int, ...]
    usage: Usage | None


@dataclass
class Replay:
    """A recording turned into a scenario: its steps in ``data_dir`` (for the server), its outputs."""

    source: Path
    format: str  # CODEX or TRANSCRIPT
    version: str  # the Codex CLI's version, or "" for a transcript
    scenario: Scenario
    data_dir: Path  # holds scenarios/NAME.json: the server's $LABKIT_DATA
    turns: list[TurnSummary]
    truncated_at: int | None = None  # the line where a second task began, if any
    closing_turn: bool = False  # True: the recording ended on a call, and an answer was added


# ---------------------------------------------------------------- recording -> scenario


def open_recording(stream: IO[str]) -> CodexSession | Transcript:
    """The reader for a recording, told by its first character: ``[`` a transcript, ``{`` Codex.

    >>> import io
    >>> open_recording(io.StringIO('  [{"request": {}, "response": {"output": []}}]')).format
    'transcript'
    """
    line, first = 1, ""
    while not first:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        body = chunk.lstrip()
        line += chunk[: len(chunk) - len(body)].count("\n")
        first = body[:1]
    stream.seek(0)
    if first == "[":
        return Transcript(stream)
    if first == "{":
        return CodexSession(stream)
    found = "an empty file" if not first else f"'{first}'"
    raise ReplayError(
        line,
        "a Codex CLI session (JSON Lines, a session_meta record first) or a transcript "
        f"(a JSON list of request/response pairs), found {found}",
    )


def replay_name(source: Path) -> str:
    """A scenario name for a recording, from its file name.

    >>> replay_name(Path("rollout-2026-01-02T03-04-05 (copy).jsonl"))
    'replay-rollout-2026-01-02T03-04-05--copy-'
    """
    name = "replay-" + re.sub(r"[^A-Za-z0-9_.-]", "-", source.stem)[:100]
    assert SCENARIO_NAME.fullmatch(name)
    return name


def load_replay(source: Path, workdir: Path) -> Replay:
    """Read a recording into a replay scenario: steps and tool outputs are written under ``workdir``.

    ``workdir/scenarios/NAME.json`` holds the steps, for a server whose ``$LABKIT_DATA`` is
    ``workdir``; ``workdir/replays/NAME.outputs.jsonl`` the tool outputs, in call order.
    Raises ``ReplayError`` (line and expectation) for a file that cannot be replayed.
    """
    name = replay_name(source)
    (workdir / "scenarios").mkdir(parents=True, exist_ok=True)
    (workdir / "replays").mkdir(parents=True, exist_ok=True)
    outputs_path = workdir / "replays" / f"{name}.outputs.jsonl"
    steps_path = workdir / "scenarios" / f"{name}.json"
    steps: list[dict[str, Any]] = []
    summaries: list[TurnSummary] = []
    with (
        source.open(encoding="utf-8", errors="replace") as stream,
        outputs_path.open("w", encoding="utf-8") as outputs,
        steps_path.open("w", encoding="utf-8") as scenario_file,
    ):
        # the scenario file is written a step a line as the turns are read, never dumped whole
        scenario_file.write(json.dumps({"name": name, "description": f"A replay of {source.name}."})[:-1])
        scenario_file.write(', "steps": [\n')
        recording = open_recording(stream)
        for turn in recording.turns():
            step = turn.step()
            scenario_file.write(("" if not steps else ",\n") + json.dumps(step))
            steps.append(step)
            texts = [turn.outputs.get(call_id, "") for call_id, _, _ in turn.calls]
            outputs.writelines(json.dumps(text) + "\n" for text in texts)
            summaries.append(
                TurnSummary(
                    turn=len(summaries),
                    line=turn.line,
                    calls=tuple(tool for _, tool, _ in turn.calls),
                    tool_output_chars=tuple(map(len, texts)),
                    usage=turn.usage,
                )
            )
        assert recording.opening is not None  # set before the first turn is yielded
        closing = bool(summaries[-1].calls)
        if closing:
            steps.append({"say": "."})
            scenario_file.write(",\n" + json.dumps(steps[-1]))
        scenario_file.write("\n]}\n")
    opening = recording.opening
    tools = opening.tools
    if tools is None:
        called = dict.fromkeys(c for s in summaries for c in s.calls)
        first = summaries[0].usage
        tools = sized_tools(list(called), opening, first.input_tokens if first else 0)
    scenario = Scenario(
        name=name,
        description=f"A replay of {source.name} ({recording.format}).",
        instructions=opening.instructions,
        user=opening.user,
        steps=steps,
        tools=tools,
        tool_outputs=outputs_path,
    )
    return Replay(
        source=source,
        format=recording.format,
        version=recording.version,
        scenario=scenario,
        data_dir=workdir,
        turns=summaries,
        truncated_at=recording.truncated_at,
        closing_turn=closing,
    )


# ---------------------------------------------------------------- tool definitions of a Codex session


def prompt_tokens(opening: Opening, tools: list[dict[str, Any]]) -> int:
    """The first request's input tokens, as labkit's server counts them (the generation prompt too)."""
    items = [{"type": "message", "role": "user", "content": opening.user}]
    rendered = render_conversation(opening.instructions, tools, items)
    return len(encode_rendered(rendered)) + len(GENERATION_PROMPT)


def sized_tools(names: list[str], opening: Opening, input_tokens: int) -> list[dict[str, Any]]:
    """Tools named as the session called them, plus one that makes the first prompt ``input_tokens`` long.

    A recorded size below what the opening already takes adds no padding tool.
    """
    tools = [
        {
            "type": "function",
            "name": name,
            "description": "A tool of the recorded session; its outputs are replayed.",
            "parameters": {"type": "object", "properties": {}},
        }
        for name in names
    ]
    padding = {"type": "function", "name": PADDING_TOOL, "parameters": {"type": "object", "properties": {}}}
    missing = input_tokens - prompt_tokens(opening, [*tools, padding])
    for _ in range(4):  # the description's first and last tokens may merge with the text around them
        if missing <= 0:
            break
        padding["description"] = text_of_tokens(len(encode_text(padding.get("description", ""))) + missing)
        missing = input_tokens - prompt_tokens(opening, [*tools, padding])
    return [*tools, padding] if padding.get("description") else tools
