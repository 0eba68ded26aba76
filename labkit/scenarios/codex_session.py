"""Codex CLI sessions, read line by line into recorded turns.

A **Codex CLI session**, ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``: JSON Lines, each
``{"timestamp", "type", "payload"}``. The first is ``session_meta`` (its ``base_instructions``
and ``cli_version``); ``response_item`` lines hold the conversation's items (``message``,
``function_call`` / ``custom_tool_call`` / ``local_shell_call``, their ``*_output``s,
``reasoning``); the ``event_msg`` line ``token_count`` after each response holds its usage
(``info.last_token_usage``: input, cached, output and reasoning tokens). Other lines are skipped.

``CodexSession.turns()`` yields each turn as it is complete, so a long session is never held
in memory whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from labkit.engine.render import content_text
from labkit.scenarios.recording import (
    CALLS,
    OUTPUTS,
    Opening,
    RecordedTurn,
    ReplayError,
    Usage,
    output_text,
)

CODEX = "codex"
CODEX_MAJOR = "0"  # the session files of Codex CLI 0.x, whose layout this reader knows


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
                    turn.outputs[str(payload.get("call_id", ""))] = output_text(payload.get("output"))
                continue
            if not (kind in CALLS or kind == "reasoning" or (kind == "message" and role == "assistant")):
                continue
            if turn is None:
                self.opening = Opening("\n\n".join(self._instructions), "\n\n".join(self._user), None)
            elif turn.outputs or turn.usage:  # the model speaks again: the turn before is complete
                yield turn
                turn = None
            turn = turn or RecordedTurn(number)
            turn.take(payload)
        if turn is None:
            raise ReplayError(self._first_line, "a session in which the model answered at least once")
        yield turn
