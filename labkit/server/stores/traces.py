"""Spans: what each stage of a response did, when, and over how much input.

A span records a stage's start and end (seconds on the server's monotonic
clock) and the work it processed: items, tokens. Spans are kept in memory per
response, for the last ``capacity`` responses, and served by
``GET /v1/labkit/traces?response_id=...``.

A finished response's trace event (``labkit.server.stores.trace_stream.trace_event``: its spans and
what a dashboard shows beside them) is kept too, in the order responses finished, for a new
subscriber that asks for the history first (``/v1/labkit/traces/stream?history=true``): in
memory (``RecentTraces``), or with ``--workers`` in the room's shared table
(``labkit.server.stores.shared_traces``), where every worker finds the finished responses of the others,
and a running appended rollout's spans as of its latest pause (``TraceStore.share_running``).

The spans by response are bounded by responses, not bytes: a trace is kept from the moment
its response opens (an appended rollout's spans are read while it runs), so it grows after it
is stored, and a size taken then would not hold. A finished event no longer grows, so the
history counts its bytes as well (``labkit serve --max-trace-history-bytes``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import FIFOCache

from labkit.limits import MAX_TRACE_HISTORY_BYTES, MAX_TRACES

BATCH = 256  # finished events read at once, by a history replay or a worker's reader


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
        """The span as the wire has it, with its ``duration``. Field by field rather than
        ``dataclasses.asdict``: every finished response's spans go through here (about 30x quicker).

        >>> from dataclasses import asdict
        >>> span = Span("render", 1.0, 1.5, tokens=12, detail={"cache": "miss"})
        >>> span.to_json() == {**asdict(span), "duration": 0.5}  # every field, none forgotten
        True
        """
        return {
            "stage": self.stage,
            "start": self.start,
            "end": self.end,
            "items": self.items,
            "tokens": self.tokens,
            "segment": self.segment,
            "detail": dict(self.detail),  # its values are set once, never changed in place
            "duration": self.duration,
        }

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
        self.shared_spans = 0  # with --workers, while it runs: how many of its spans the room's file has

    @contextmanager
    def stage(self, name: str, **detail: Any) -> Iterator[Span]:
        span = Span(stage=name, start=time.perf_counter(), segment=self.segment, detail=dict(detail))
        try:
            yield span
        finally:
            span.end = time.perf_counter()
            self.spans.append(span)


# --- finished responses, in the order they finished


@dataclass(frozen=True)
class Row:
    seq: int  # grows by one per finished response, in the order they finished
    owner: str
    event: str  # the trace event's JSON, parsed only for a subscriber who may see it


def event_json(event: dict[str, Any]) -> str:
    """A trace event as compact ASCII JSON: its length is its size in bytes.

    >>> event_json({"response_id": "resp_1", "name": "Zoë"})
    '{"response_id":"resp_1","name":"Zo\\\\u00eb"}'
    """
    return json.dumps(event, separators=(",", ":"))


class FinishedTraces(Protocol):
    """Finished responses' trace events, oldest first, each under a ``seq`` that only grows."""

    def append(self, owner: str, event: dict[str, Any]) -> None:
        """Keep one finished response's trace event (the oldest may go to make room)."""

    def last(self) -> int:
        """The ``seq`` of the newest event kept (0 for none): where a new subscriber's history ends."""

    def after(
        self, seq: int, limit: int = BATCH, *, upto: int | None = None, owner: str | None = None
    ) -> list[Row]:
        """Up to ``limit`` events after ``seq`` (and up to ``upto``), oldest first; ``owner``'s only,
        if given."""


class RoomTraces(FinishedTraces, Protocol):
    """With ``--workers``, the room's traces every worker reads (``labkit.server.stores.shared_traces``):
    its finished events, and the spans so far of the rollouts still running."""

    def spans(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The spans of ``owner``'s response, finished or so far; None for neither."""

    def share_running(self, owner: str, response_id: str, first: int, spans: list[dict[str, Any]]) -> None:
        """Write the spans a running response added since its last write (``first`` onwards)."""

    def finished(self, response_id: str) -> None:
        """Drop a response's running rows: its finished event has them."""


class RecentTraces:
    """One process's finished trace events, in memory: the last ``capacity`` of them, and no more
    than ``max_bytes`` of JSON together (an event larger than that alone is not kept).

    >>> recent = RecentTraces(capacity=2)
    >>> for n in range(3):
    ...     recent.append("key_a" if n else "key_b", {"response_id": f"resp_{n}"})
    >>> [row.seq for row in recent.after(0)], recent.last(), recent.after(0, owner="key_b")
    ([2, 3], 3, [])
    """

    def __init__(self, capacity: int = MAX_TRACES, max_bytes: int = MAX_TRACE_HISTORY_BYTES) -> None:
        self.capacity, self.max_bytes = capacity, max_bytes
        self.bytes = 0  # the JSON of the events kept, together
        self._rows: deque[Row] = deque()
        self._last = 0

    def append(self, owner: str, event: dict[str, Any]) -> None:
        self._last += 1
        row = Row(self._last, owner, event_json(event))
        self._rows.append(row)
        self.bytes += len(row.event)
        while self._rows and (len(self._rows) > self.capacity or self.bytes > self.max_bytes):
            self.bytes -= len(self._rows.popleft().event)

    def last(self) -> int:
        return self._last

    def after(
        self, seq: int, limit: int = BATCH, *, upto: int | None = None, owner: str | None = None
    ) -> list[Row]:
        if not self._rows:
            return []
        # Every seq from the oldest kept to the newest is here, so the first one wanted is found
        # by its distance from the oldest, not by a search.
        start = max(0, seq + 1 - self._rows[0].seq)
        end = len(self._rows) if upto is None else max(0, upto + 1 - self._rows[0].seq)
        rows = itertools.islice(self._rows, start, end)
        return list(itertools.islice((r for r in rows if owner is None or r.owner == owner), limit))

    def __len__(self) -> int:
        return len(self._rows)


class TraceStore:
    """This process's traces, the oldest response's first out (``cachetools``), and the finished
    responses' trace events (``history``): this process's in memory (at most ``history_bytes`` of
    them), or with ``--workers`` (``shared``) the room's, where ``get`` finds the other workers'
    responses too, finished or (appended rollouts) running.

    >>> store = TraceStore(capacity=2); trace = Trace(); store.put("key_a", "resp_1", trace)
    >>> store.share_running("key_a", "resp_1", trace)  # one worker: nothing to share
    >>> store.get("key_a", "resp_1") is trace, store.get("key_b", "resp_1")
    (True, None)
    """

    def __init__(
        self,
        capacity: int = MAX_TRACES,
        shared: RoomTraces | None = None,
        history_bytes: int = MAX_TRACE_HISTORY_BYTES,
    ) -> None:
        self.shared = shared
        self._traces: FIFOCache[str, tuple[str, Trace]] = FIFOCache(capacity)
        self.history: FinishedTraces = shared if shared is not None else RecentTraces(capacity, history_bytes)

    @property
    def capacity(self) -> int:
        return int(self._traces.maxsize)

    def put(self, owner: str, response_id: str, trace: Trace) -> None:
        self._traces[response_id] = (owner, trace)

    def finish(self, owner: str, event: dict[str, Any]) -> None:
        """Keep a finished response's trace event, for the history and (``--workers``) for every
        worker's ``get``: committed when this returns, before the response's last event is sent."""
        # The response has finished and its answer is queued: an event lost to a shared file
        # locked past sqlite3's busy timeout must not turn into an error after it.
        with contextlib.suppress(sqlite3.OperationalError):
            self.history.append(owner, event)
            found = self._traces.get(event["response_id"])
            if self.shared is not None and found is not None and found[1].shared_spans:
                self.shared.finished(event["response_id"])  # superseded by the row just committed

    def share_running(self, owner: str, response_id: str, trace: Trace) -> None:
        """With ``--workers``: a running response's spans so far, for every worker's ``get``,
        committed when this returns (an appended rollout's, before its pause's event is sent).
        Nothing with one process: its ``get`` reads the trace itself."""
        count = len(trace.spans)
        if self.shared is None or count == trace.shared_spans:
            return
        added = [span.to_json() for span in trace.spans[trace.shared_spans : count]]
        # A file locked past the busy timeout keeps the spans of the pause before, and the next
        # write carries these too: the rollout goes on.
        with contextlib.suppress(sqlite3.OperationalError):
            self.shared.share_running(owner, response_id, trace.shared_spans, added)
            trace.shared_spans = count

    def get(self, owner: str, response_id: str) -> Trace | None:
        """``owner``'s response's spans: this process's, else (``--workers``) another worker's,
        finished, else running as of its latest pause; None if neither is kept."""
        found = self._traces.get(response_id)
        if found:
            return found[1] if found[0] == owner else None
        spans = self.shared.spans(owner, response_id) if self.shared is not None else None
        if spans is None:
            return None
        trace = Trace()
        trace.spans = [Span.from_json(span) for span in spans]
        return trace
