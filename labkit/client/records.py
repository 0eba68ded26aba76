"""What the client records of each turn: when it sent, saw the first and last delta, and was
done, and the tools it ran. ``labkit.client.frame`` joins these with the server's spans.

    >>> record = TurnRecord("websocket", 0, "resp_1", sent=1.0, build=None, first_delta=1.05,
    ...                     last_delta=1.2, done=1.25, tools=[ToolRun("read_file", 1.3, 1.32, 120)])
    >>> round(record.ttft, 3), round(record.tool_seconds, 3)
    (0.05, 0.02)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolRun:
    name: str
    start: float
    end: float
    output_chars: int


@dataclass
class TurnRecord:
    """One turn as the client saw it, on the client's monotonic clock (seconds).

        for record in Rollout("websocket").play(server.base_url):
            print(record.turn, record.calls, f"TTFT {record.ttft * 1000:.0f} ms")
    """

    design: str
    turn: int
    response_id: str
    sent: float
    build: tuple[float, float] | None  # building the request, on the client
    first_delta: float | None
    last_delta: float | None
    done: float
    tools: list[ToolRun] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    observed: tuple[float, float] | None = None  # a watcher's time between this turn and the next

    @property
    def ttft(self) -> float | None:
        return None if self.first_delta is None else self.first_delta - self.sent

    @property
    def tool_seconds(self) -> float:
        return sum(t.end - t.start for t in self.tools)
