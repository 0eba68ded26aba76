"""SSE framing: the documented frame, one event line and one data line, every event of a turn
framed and parsed back.
"""

from __future__ import annotations

import json

from labkit.api.sse import encode_event, frame
from tests.api.turns import text_turn

# ---------------------------------------------------------------- SSE framing


def test_the_documented_frame() -> None:
    event = {"type": "response.created", "sequence_number": 0}
    assert (
        frame(event) == b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    )


def test_a_frame_is_one_event_line_and_one_data_line() -> None:
    event = {"type": "response.output_text.delta", "delta": "line one\nline two ✓\r\n", "sequence_number": 4}
    raw = frame(event)
    assert raw.endswith(b"\n\n")
    lines = raw.decode("utf-8").split("\n")
    assert lines[0] == "event: response.output_text.delta"
    assert lines[1].startswith("data: ")
    assert lines[2:] == ["", ""]
    assert json.loads(lines[1].removeprefix("data: ")) == event
    assert "✓" in lines[1]  # UTF-8, not \\u escapes
    assert encode_event(event) == lines[1].removeprefix("data: ")


def test_every_event_of_a_turn_frames_and_parses_back() -> None:
    events, _ = text_turn()
    stream = b"".join(frame(e) for e in events).decode("utf-8")
    blocks = [b for b in stream.split("\n\n") if b]
    assert len(blocks) == len(events)
    for block, event in zip(blocks, events, strict=True):
        kind, data = block.split("\n")
        assert kind == f"event: {event['type']}"
        assert json.loads(data.removeprefix("data: ")) == event
