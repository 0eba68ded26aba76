"""Replay scenarios: a recorded agent session, read as a stream, played again on any design.

Two recordings are read (the format is told by the file's first character):

1. A **Codex CLI session**, ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``: JSON Lines, each
   ``{"timestamp", "type", "payload"}``. The first is ``session_meta`` (its ``base_instructions``
   and ``cli_version``); ``response_item`` lines hold the conversation's items (``message``,
   ``function_call`` / ``custom_tool_call`` / ``local_shell_call``, their ``*_output``s,
   ``reasoning``); the ``event_msg`` line ``token_count`` after each response holds its usage
   (``info.last_token_usage``: input, cached, output and reasoning tokens). Other lines are skipped.
2. A **transcript**: a JSON list of request/response pairs, one per response, in order::

       [{"request": {...the POST /v1/responses body...},
         "response": {...the Response object, its "output" and "usage"...}}, ...]

   A turn's tool outputs are the ``function_call_output`` items of the next request whose
   ``call_id`` is one of the turn's calls. A request with ``"generate": false`` (a warm-up) is
   skipped. ``tools/record_transcript.py`` records one from any HTTP client.

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from labkit.engine.policies import text_of_tokens
from labkit.engine.render import GENERATION_PROMPT, content_text, encode_rendered, render_conversation
from labkit.engine.tokenizer import encode_text
from labkit.scenarios import SCENARIO_NAME, Scenario

CODEX = "codex"
TRANSCRIPT = "transcript"
CODEX_MAJOR = "0"  # the session files of Codex CLI 0.x, whose layout this reader knows
PADDING_TOOL = "unrecorded_tools"  # stands for the tool definitions a Codex session does not record
CALLS = {"function_call", "custom_tool_call", "local_shell_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output"}
CHUNK = 1 << 16  # characters read at a time from a transcript
CUT_MARGIN = 8  # an error this near the end of what was read may be a value cut short ("fals")


class ReplayError(ValueError):
    """A recording that cannot be replayed: one line, naming the line and what was expected.

    >>> str(ReplayError(3, "a JSON object"))
    'line 3: expected a JSON object'
    """

    def __init__(self, line: int, expected: str) -> None:
        super().__init__(f"line {line}: expected {expected}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Usage:
    """One response's tokens, as the recording says the server counted them."""

    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0


@dataclass
class RecordedTurn:
    """One response of the recording: what the model said and called, and what the tools returned."""

    line: int
    text: str = ""  # the assistant's message text, if any
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (call_id, name, arguments)
    outputs: dict[str, str] = field(default_factory=dict)  # by call_id
    usage: Usage | None = None

    def step(self) -> dict[str, Any]:
        """The scenario step that says and calls what this turn did.

        >>> RecordedTurn(1, "Done.", usage=Usage(10, 0, 2, reasoning_tokens=3)).step()
        {'say': 'An agent. Done.'}
        """
        hidden = text_of_tokens(self.usage.reasoning_tokens) if self.usage else ""
        say = " ".join(t for t in (hidden, self.text) if t)
        step: dict[str, Any] = {"say": say} if say else {}
        calls = [{"name": name, "arguments": args} for _, name, args in self.calls]
        if len(calls) == 1:
            step["call"] = calls[0]
        elif calls:
            step["calls"] = calls
        return step or {"say": "."}


@dataclass
class Opening:
    """What the recording's first request held besides its turns."""

    instructions: str
    user: str
    tools: list[dict[str, Any]] | None  # None: not recorded (a Codex session)


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


# ---------------------------------------------------------------- Codex CLI sessions


def _records(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line as a ``{"type", "payload"}`` record, with its line number."""
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            at = f"{e.msg.removesuffix(' at')} at column {e.pos + 1}"  # the line alone was parsed
            raise ReplayError(number, f"a JSON object on each line ({at})") from None
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise ReplayError(number, 'a {"timestamp", "type", "payload"} record')
        if not isinstance(record.get("payload"), dict):
            raise ReplayError(number, f"an object as the '{record['type']}' record's payload")
        yield number, record


def _session_meta(number: int, record: dict[str, Any]) -> tuple[str, str]:
    """The session's version and base instructions, from its first record."""
    if record["type"] != "session_meta":
        raise ReplayError(number, f"a 'session_meta' record first, found '{record['type']}'")
    meta = record["payload"]
    version = str(meta.get("cli_version", ""))
    if version and version.split(".")[0] != CODEX_MAJOR:
        raise ReplayError(
            number, f"a known format version: Codex CLI {CODEX_MAJOR}.x, found cli_version '{version}'"
        )
    base = meta.get("base_instructions")
    text = base.get("text") if isinstance(base, dict) else base if isinstance(base, str) else None
    return version, str(text or meta.get("instructions") or "")


def _output_text(output: Any) -> str:
    """A tool output as the model read it: a string, content parts, or Codex's ``{content}`` object."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return content_text(output)
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]
    return json.dumps(output)


def _call(item: dict[str, Any]) -> tuple[str, str, str]:
    kind = item["type"]
    call_id = str(item.get("call_id") or item.get("id") or "")
    if kind == "custom_tool_call":
        return call_id, str(item.get("name")), str(item.get("input", ""))
    if kind == "local_shell_call":
        return call_id, "local_shell", json.dumps(item.get("action", {}))
    return call_id, str(item.get("name")), str(item.get("arguments", ""))


def _usage(last: dict[str, Any]) -> Usage:
    return Usage(
        input_tokens=int(last.get("input_tokens", 0)),
        cached_tokens=int(last.get("cached_input_tokens", 0)),
        output_tokens=int(last.get("output_tokens", 0)),
        reasoning_tokens=int(last.get("reasoning_output_tokens", 0)),
    )


class CodexSession:
    """A Codex CLI session being read: ``turns()`` yields each turn as it is complete.

    ``version`` is known once it is made; ``opening`` once the first turn is yielded;
    ``truncated_at`` once ``turns()`` is done.
    """

    format = CODEX

    def __init__(self, lines: Iterable[str]) -> None:
        self._records = _records(lines)
        first = next(self._records, None)
        if first is None:
            raise ReplayError(1, "a 'session_meta' record first, found an empty file")
        self._first_line = first[0]
        self.version, base = _session_meta(*first)
        self._instructions = [base] if base else []
        self._user: list[str] = []
        self.opening: Opening | None = None
        self.truncated_at: int | None = None

    def turns(self) -> Iterator[RecordedTurn]:
        turn: RecordedTurn | None = None
        for number, record in self._records:
            payload = record["payload"]
            kind = payload.get("type")
            if record["type"] == "event_msg" and kind == "token_count":
                info = payload.get("info")
                last = info.get("last_token_usage") if isinstance(info, dict) else None
                if isinstance(last, dict) and turn is not None and turn.usage is None:
                    turn.usage = _usage(last)
                continue
            if record["type"] != "response_item":
                continue
            role = payload.get("role")
            if kind == "message" and role in ("user", "developer", "system"):
                if turn is None:
                    text = content_text(payload.get("content"))
                    (self._user if role == "user" else self._instructions).append(text)
                elif role == "user":
                    self.truncated_at = number
                    break
                continue  # a developer note mid-task is not replayed
            if kind in OUTPUTS:
                if turn is not None:
                    turn.outputs[str(payload.get("call_id", ""))] = _output_text(payload.get("output"))
                continue
            if not (kind in CALLS or kind == "reasoning" or (kind == "message" and role == "assistant")):
                continue
            if turn is None:
                self.opening = Opening("\n\n".join(self._instructions), "\n\n".join(self._user), None)
            elif turn.outputs or turn.usage:  # the model speaks again: the turn before is complete
                yield turn
                turn = None
            turn = turn or RecordedTurn(number)
            if kind in CALLS:
                turn.calls.append(_call(payload))
            elif kind == "message":
                turn.text = " ".join(t for t in (turn.text, content_text(payload.get("content"))) if t)
        if turn is None:
            raise ReplayError(self._first_line, "a session in which the model answered at least once")
        yield turn


# ---------------------------------------------------------------- transcripts


def _json_array(stream: IO[str]) -> Iterator[tuple[int, Any]]:
    """The elements of a JSON list, read a chunk at a time, each with the line it starts on.

    >>> import io
    >>> list(_json_array(io.StringIO('[{"a": 1},\\n {"b": 2}]')))
    [(1, {'a': 1}), (2, {'b': 2})]
    """
    decoder = json.JSONDecoder()
    buf, pos, line, eof = "", 0, 1, False  # line: the line buf[pos] is on

    def more() -> bool:
        nonlocal buf, pos, eof
        chunk = "" if eof else stream.read(max(CHUNK, len(buf) - pos))  # doubling: few reads a pair
        eof = not chunk
        buf, pos = buf[pos:] + chunk, 0
        return bool(chunk)

    def next_char() -> str:
        """The next character that is not white space ("" at the end), ``pos`` on it."""
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf):
                return buf[pos]
            if not more():
                return ""

    if next_char() != "[":
        raise ReplayError(line, "a JSON list of request/response pairs")
    pos += 1
    if next_char() == "]":
        return
    while True:
        while True:
            try:
                value, end = decoder.raw_decode(buf, pos)
                break
            except json.JSONDecodeError as e:
                # Cut by the chunk's end (a string not closed, a word or number cut): read on.
                # Any other error has text after it that no more text can mend.
                cut = e.msg.startswith("Unterminated string") or e.pos >= len(buf) - CUT_MARGIN
                where = line + buf.count("\n", pos, e.pos)
                if not (cut and more()):
                    raise ReplayError(
                        where, f"a JSON value in the list ({e.msg.removesuffix(' at')})"
                    ) from None
        yield line, value
        line += buf.count("\n", pos, end)
        pos = end
        following = next_char()
        if following == "]":
            return
        if following != ",":
            raise ReplayError(line, "',' or ']' after a pair" if following else "']' to close the list")
        pos += 1
        next_char()


def _pair(line: int, pair: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    shape = '{"request": {...}, "response": {...}}'
    if not isinstance(pair, dict):
        raise ReplayError(line, f"a pair {shape}, found a {type(pair).__name__}")
    request, response = pair.get("request"), pair.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        missing = "request" if not isinstance(request, dict) else "response"
        raise ReplayError(line, f"a pair {shape}: its '{missing}' is not an object")
    if not isinstance(response.get("output"), list):
        raise ReplayError(line, "a response with an 'output' list")
    return request, response


def _input_items(request: dict[str, Any]) -> list[dict[str, Any]]:
    items = request.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return [i for i in items or [] if isinstance(i, dict)]


def _response_usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=int(usage.get("input_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        reasoning_tokens=int(output_details.get("reasoning_tokens", 0)),
    )


class Transcript:
    """A transcript being read, one pair at a time (see the module's docstring for its shape)."""

    format = TRANSCRIPT
    version = ""

    def __init__(self, stream: IO[str]) -> None:
        self._pairs = _json_array(stream)
        self.opening: Opening | None = None
        self.truncated_at: int | None = None

    def turns(self) -> Iterator[RecordedTurn]:
        turn: RecordedTurn | None = None
        for line, pair in self._pairs:
            request, response = _pair(line, pair)
            if request.get("generate") is False:
                continue  # a warm-up: prepares state, samples nothing
            items = _input_items(request)
            if self.opening is None:
                self.opening = self._opening(request, items)
            if turn is not None:
                wanted = {call_id for call_id, _, _ in turn.calls}
                for item in items:
                    if item.get("type") in OUTPUTS and item.get("call_id") in wanted:
                        turn.outputs[str(item["call_id"])] = _output_text(item.get("output"))
                yield turn
                if not turn.calls and any(_is_message(i, "user") for i in items):
                    self.truncated_at = line  # the model answered, and a user spoke again
                    return
            turn = RecordedTurn(line, usage=_response_usage(response.get("usage")))
            for item in response["output"]:
                if isinstance(item, dict) and item.get("type") in CALLS:
                    turn.calls.append(_call(item))
                elif isinstance(item, dict) and item.get("type") == "message":
                    turn.text = " ".join(t for t in (turn.text, content_text(item.get("content"))) if t)
        if turn is None:
            raise ReplayError(1, "a transcript with at least one sampled response")
        yield turn

    @staticmethod
    def _opening(request: dict[str, Any], items: list[dict[str, Any]]) -> Opening:
        system = [str(request.get("instructions") or "")]
        system += [content_text(i.get("content")) for i in items if _is_message(i, "developer", "system")]
        user = [content_text(i.get("content")) for i in items if _is_message(i, "user")]
        tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
        return Opening("\n\n".join(t for t in system if t), "\n\n".join(user), tools)


def _is_message(item: dict[str, Any], *roles: str) -> bool:
    return item.get("type", "message") == "message" and item.get("role") in roles


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
