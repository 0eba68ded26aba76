"""Spans: what each stage of a response did, when, and over how much input.

A span records a stage's start and end (seconds on the server's monotonic
clock) and the work it processed: items, tokens. Spans are kept in memory per
response, for the last ``capacity`` responses, and served by
``GET /v1/labkit/traces?response_id=...``. With ``--workers``, a finished response
that another worker ran is found in the room's shared table instead
(``labkit.server.shared_traces``).

The store is bounded by responses, not bytes: a trace is kept from the moment its
response opens (an appended rollout's spans are read while it runs), so it grows
after it is stored, and a size taken then would not hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from cachetools import FIFOCache

from labkit.limits import MAX_TRACES

if TYPE_CHECKING:
    from labkit.server.shared_traces import SharedTraces


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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Span:
        """The span ``to_json`` gave (its ``duration`` is derived, so it is left out).

        >>> span = Span("render", 1.0, 1.5, tokens=12); Span.from_json(span.to_json()) == span
        True
        """
        return cls(**{name: value for name, value in data.items() if name != "duration"})


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
    """This process's traces, the oldest response's first out (``cachetools``); ``shared``
    (with ``--workers``) holds the other workers'."""

    def __init__(self, capacity: int = MAX_TRACES, shared: SharedTraces | None = None) -> None:
        self.shared = shared
        self._traces: FIFOCache[str, tuple[str, Trace]] = FIFOCache(capacity)

    @property
    def capacity(self) -> int:
        return int(self._traces.maxsize)

    def put(self, owner: str, response_id: str, trace: Trace) -> None:
        self._traces[response_id] = (owner, trace)

    def get(self, owner: str, response_id: str) -> Trace | None:
        found = self._traces.get(response_id)
        if found:
            return found[1] if found[0] == owner else None
        event = self.shared.find(owner, response_id) if self.shared is not None else None
        if event is None:
            return None
        trace = Trace()
        trace.spans = [Span.from_json(span) for span in event["spans"]]
        return trace
