"""Spans: what each stage of a response did, when, and over how much input.

A span records a stage's start and end (seconds on the server's monotonic
clock) and the work it processed: items, tokens. Spans are kept in memory per
response, for the last ``capacity`` responses, and served by
``GET /v1/labkit/traces?response_id=...``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Span:
    stage: str
    start: float
    end: float = 0.0
    items: int = 0
    tokens: int = 0
    segment: int = 0  # appended rollouts: which sampling segment (turn) of the response
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "duration": self.duration}


class Trace:
    """The spans of one response, in the order their stages ran."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.segment = 0

    @contextmanager
    def stage(self, name: str, **detail: Any) -> Iterator[Span]:
        span = Span(stage=name, start=time.perf_counter(), segment=self.segment, detail=dict(detail))
        try:
            yield span
        finally:
            span.end = time.perf_counter()
            self.spans.append(span)


class TraceStore:
    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._traces: OrderedDict[str, tuple[str, Trace]] = OrderedDict()

    def put(self, owner: str, response_id: str, trace: Trace) -> None:
        self._traces[response_id] = (owner, trace)
        self._traces.move_to_end(response_id)
        while len(self._traces) > self.capacity:
            self._traces.popitem(last=False)

    def get(self, owner: str, response_id: str) -> Trace | None:
        found = self._traces.get(response_id)
        return found[1] if found and found[0] == owner else None
