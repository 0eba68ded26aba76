"""Replay scenarios: recorded sessions (Codex CLI JSONL, transcripts) read and played again.

The fixtures in data/replays were recorded from the Codex CLI 0.171 against labkit's server
(its generic model answering): one session over WebSocket, one over HTTP, and the HTTP one's
requests and responses as a transcript. So the replayed sizes can be held to the file's own
token counts, up to the tokenizer's slack: labkit's per-rollout session line, fresh call ids,
and the opening messages folded into one instructions block and one user message.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.paths import DATA_ENV, builtin_data_dir
from labkit.scenarios import transcript as transcript_module
from labkit.scenarios.recording import ReplayError
from labkit.scenarios.replay import PADDING_TOOL, Replay, load_replay, prompt_tokens

pytestmark = pytest.mark.slow  # many rollouts

REPLAYS = builtin_data_dir() / "replays"
CODEX_FILES = ["codex-websocket.jsonl", "codex-http.jsonl"]
TRANSCRIPT = "transcript-http.json"


def slack(recorded: int) -> int:
    """How far a replayed prompt may be from the recorded one, in tokens."""
    return max(48, recorded // 100)


def codex_records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (REPLAYS / name).read_text().splitlines() if line.strip()]


def codex_usages(name: str) -> list[dict[str, int]]:
    """The file's own token_count events, each response's usage."""
    return [
        r["payload"]["info"]["last_token_usage"]
        for r in codex_records(name)
        if r["type"] == "event_msg" and r["payload"].get("type") == "token_count" and r["payload"]["info"]
    ]


def codex_outputs(name: str) -> list[str]:
    return [
        r["payload"]["output"]
        for r in codex_records(name)
        if r["type"] == "response_item" and r["payload"]["type"] == "function_call_output"
    ]


# ---------------------------------------------------------------- reading the fixtures


@pytest.mark.parametrize("name", CODEX_FILES)
def test_a_codex_session_replays_its_turns_calls_outputs_and_usage(name: str, tmp_path: Path) -> None:
    replay = load_replay(REPLAYS / name, tmp_path)
    usages = codex_usages(name)
    assert replay.format == "codex" and replay.version == "0.171.0"
    assert len(replay.turns) == len(usages) == replay.scenario.turns == 4
    assert [t.usage.input_tokens for t in replay.turns] == [u["input_tokens"] for u in usages]
    assert [t.usage.output_tokens for t in replay.turns] == [u["output_tokens"] for u in usages]
    replayed = [n for t in replay.turns for n in t.tool_output_chars]
    assert replayed == [len(o) for o in codex_outputs(name)]
    # the outputs the client will return, in call order, are the file's own
    outputs = [json.loads(line) for line in replay.scenario.tool_outputs.read_text().splitlines()]
    assert outputs == codex_outputs(name)
    assert [t.calls for t in replay.turns] == [
        ("exec_command",),
        ("write_stdin",),
        ("request_user_input",),
        (),
    ]
    # the tool definitions Codex did not record are sized from the first turn's prompt
    tools = replay.scenario.tools
    assert tools[-1]["name"] == PADDING_TOOL
    first = usages[0]["input_tokens"]
    from labkit.scenarios.recording import Opening

    opening = Opening(replay.scenario.instructions, replay.scenario.user, None)
    assert abs(prompt_tokens(opening, tools) - first) <= 2


def test_a_transcript_replays_the_same_session_as_its_codex_file(tmp_path: Path) -> None:
    transcript = load_replay(REPLAYS / TRANSCRIPT, tmp_path)
    session = load_replay(REPLAYS / "codex-http.jsonl", tmp_path)
    pairs = json.loads((REPLAYS / TRANSCRIPT).read_text())
    assert transcript.format == "transcript" and len(transcript.turns) == len(pairs) == 4
    assert transcript.scenario.tools == pairs[0]["request"]["tools"]  # recorded, so exact
    assert [t.calls for t in transcript.turns] == [t.calls for t in session.turns]
    assert [t.tool_output_chars for t in transcript.turns] == [t.tool_output_chars for t in session.turns]
    assert [t.usage for t in transcript.turns] == [t.usage for t in session.turns]
    assert transcript.scenario.steps == session.scenario.steps


def test_a_transcript_is_read_the_same_in_any_chunk_size(tmp_path: Path, monkeypatch) -> None:
    whole = load_replay(REPLAYS / TRANSCRIPT, tmp_path / "whole")
    monkeypatch.setattr(transcript_module, "CHUNK", 997)  # pairs and strings cut anywhere
    chunked = load_replay(REPLAYS / TRANSCRIPT, tmp_path / "chunked")
    assert chunked.turns == whole.turns and chunked.scenario.steps == whole.scenario.steps


# ---------------------------------------------------------------- played against a real server


def parallel_transcript(path: Path) -> Path:
    """A hand-made transcript: two calls in one turn, then an answer with 5 hidden reasoning tokens."""
    tool = {"type": "function", "name": "look", "parameters": {"type": "object", "properties": {}}}
    first = {"model": "m", "instructions": "Be brief.", "tools": [tool], "input": "Look twice."}
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "look", "arguments": f'{{"n": {i}}}'}
        for i in (1, 2)
    ]
    outputs = [
        {"type": "function_call_output", "call_id": f"c{i}", "output": "seen " * 40 * i} for i in (1, 2)
    ]
    usage = {"input_tokens": 0, "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 5}}
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Both seen."}],
    }
    pairs = [
        {"request": first, "response": {"output": calls, "usage": {"input_tokens": 0, "output_tokens": 0}}},
        {"request": {**first, "input": [*calls, *outputs]}, "response": {"output": [answer], "usage": usage}},
    ]
    path.write_text(json.dumps(pairs))
    return path


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Replay]]]:
    """Every fixture as a replay in one folder, and a server that finds their steps there."""
    workdir = tmp_path_factory.mktemp("replays")
    replays = {name: load_replay(REPLAYS / name, workdir) for name in [*CODEX_FILES, TRANSCRIPT]}
    replays["parallel"] = load_replay(parallel_transcript(workdir / "parallel.json"), workdir)
    with LabkitServer(env={DATA_ENV: str(workdir)}) as server:
        yield server.base_url, replays


@pytest.mark.parametrize("name", [*CODEX_FILES, TRANSCRIPT])
@pytest.mark.parametrize("design", ["naive", "websocket"])
def test_a_replayed_rollout_has_the_recorded_turns_and_sizes(replayed, name: str, design: str) -> None:
    base_url, replays = replayed
    replay = replays[name]
    rollout = Rollout.run(base_url, design, replay.scenario)
    assert len(rollout.records) == len(replay.turns)
    for record, turn in zip(rollout.records, replay.turns, strict=True):
        assert tuple(record.calls) == turn.calls
        assert tuple(t.output_chars for t in record.tools) == turn.tool_output_chars
        assert record.usage["output_tokens"] == turn.usage.output_tokens
        recorded = turn.usage.input_tokens
        assert abs(record.usage["input_tokens"] - recorded) <= slack(recorded), (turn.turn, record.usage)


def test_parallel_calls_and_hidden_reasoning_replay_as_recorded(replayed) -> None:
    base_url, replays = replayed
    replay = replays["parallel"]
    rollout = Rollout.run(base_url, "websocket", replay.scenario)
    assert [r.calls for r in rollout.records] == [["look", "look"], []]
    assert [t.output_chars for t in rollout.records[0].tools] == [200, 400]
    # "Both seen." is 3 tokens, and the 5 reasoning tokens are decoded before it
    assert rollout.records[1].usage["output_tokens"] == 5 + 3


# ---------------------------------------------------------------- bad files: one line each


CODEX_META = {
    "type": "session_meta",
    "payload": {"cli_version": "0.171.0", "base_instructions": {"text": "x"}},
}
CALL = {"type": "response_item", "payload": {"type": "function_call", "call_id": "c", "name": "n"}}


def lines(*records: Any) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


BAD_FILES = {
    "prose.txt": ("# Notes\nnot a session\n", "line 1: expected a Codex CLI session"),
    "empty.jsonl": ("\n\n", "line 3: expected a Codex CLI session"),
    "no-meta.jsonl": (lines(CALL), "line 1: expected a 'session_meta' record first, found 'response_item'"),
    "future.jsonl": (
        lines({"type": "session_meta", "payload": {"cli_version": "1.2.0"}}),
        "line 1: expected a known format version: Codex CLI 0.x, found cli_version '1.2.0'",
    ),
    "early-layout.jsonl": (
        lines({"id": "x", "timestamp": "t", "instructions": ""}),
        'line 1: expected a {"timestamp", "type", "payload"} record',
    ),
    "broken.jsonl": (lines(CODEX_META, CALL, '{"type": "event_msg", "pay'), "line 3: expected a JSON object"),
    "no-answer.jsonl": (lines(CODEX_META), "line 1: expected a session in which the model answered"),
    "broken.json": (
        '[{"request": {}, "response": {"output": []}},\n {"request": {,\n',
        "line 2: expected a JSON",
    ),
    "unpaired.json": ('[\n{"request": {}}\n]', "line 2: expected a pair"),
    "unclosed.json": ('[{"request": {}, "response": {"output": []}}\n', "line 2: expected ']' to close"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_file_is_one_line_naming_the_line_and_what_was_expected(name: str, tmp_path: Path) -> None:
    text, expected = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ReplayError) as caught:
        load_replay(path, tmp_path / "out")
    message = str(caught.value)
    assert message.startswith(expected) and "\n" not in message, message


def labkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_command_answers_a_bad_file_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(BAD_FILES["broken.jsonl"][0])
    done = labkit("replay", str(path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "labkit replay: error: broken.jsonl: line 3: expected a JSON object on each line "
        "(Unterminated string starting at column 23)"
    ]
    missing = labkit("replay", str(tmp_path / "nothing.jsonl"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- a long session, as a stream


def long_session(path: Path, turns: int) -> None:
    """A Codex session of ``turns`` turns, each made of the records of the fixture's first turn.

    Those are Codex's own lines for one call: the call, its usage record, the command's
    completion event, its output and the token_count (with fresh call ids each turn).
    """
    records = (REPLAYS / "codex-websocket.jsonl").read_text().splitlines()
    opening, turn, answer = records[:9], records[9:14], records[22:]
    call_id = json.loads(turn[0])["payload"]["call_id"]
    with path.open("w") as f:
        f.writelines(line + "\n" for line in opening)
        for i in range(turns):
            fresh = f"call_{i:048x}"
            f.writelines(line.replace(call_id, fresh) + "\n" for line in turn)
        f.writelines(line + "\n" for line in answer)


def test_a_ten_thousand_turn_session_is_read_as_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    long_session(path, 10_000)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        replay = load_replay(path, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(replay.turns) == 10_001 and replay.turns[-1].calls == ()
    assert {t.tool_output_chars for t in replay.turns[:-1]} == {(199,)}
    # What is kept is each turn's step (its calls' names and arguments) and sizes, never the
    # file or its tool outputs: here ~1.2 KB a turn against ~3.6 KB of file.
    assert peak < size / 2, f"peak {peak:,} bytes for a file of {size:,}"


# ---------------------------------------------------------------- the command, against a real server


def test_labkit_replay_prints_the_comparison_table() -> None:
    done = labkit(
        "replay", str(REPLAYS / "codex-websocket.jsonl"), "--tps", "1000", "--designs", "naive,websocket"
    )
    assert done.returncode == 0, done.stderr
    assert "codex-websocket.jsonl: a Codex CLI 0.171.0 session, 4 turns, 3 tool calls replayed" in done.stderr
    table = done.stdout.strip().splitlines()
    assert table[0].startswith("labkit-spark (1000 tokens/s)")
    assert [row.split()[0] for row in table[2:]] == ["naive", "websocket"]
