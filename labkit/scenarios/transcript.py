"""Transcripts, read one request/response pair at a time into recorded turns.

A **transcript**: a JSON list of request/response pairs, one per response, in order::

    [{"request": {...the POST /v1/responses body...},
      "response": {...the Response object, its "output" and "usage"...}}, ...]

A turn's tool outputs are the ``function_call_output`` items of the next request whose
``call_id`` is one of the turn's calls. A request with ``"generate": false`` (a warm-up) is
skipped. ``tools/record_transcript.py`` records one from any HTTP client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from labkit.engine.render import content_text
from labkit.scenarios.recording import (
    OUTPUTS,
    Opening,
    RecordedTurn,
    ReplayError,
    Usage,
    output_text,
)

TRANSCRIPT = "transcript"
CHUNK = 1 << 16  # characters read at a time from a transcript
CUT_MARGIN = 8  # an error this near the end of what was read may be a value cut short ("fals")


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
                        turn.outputs[str(item["call_id"])] = output_text(item.get("output"))
                yield turn
                if not turn.calls and any(_is_message(i, "user") for i in items):
                    self.truncated_at = line  # the model answered, and a user spoke again
                    return
            turn = RecordedTurn(line, usage=_response_usage(response.get("usage")))
            for item in response["output"]:
                if isinstance(item, dict):
                    turn.take(item)
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
