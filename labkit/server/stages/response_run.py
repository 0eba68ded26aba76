"""A response on its way through the pipeline. The conversation it leaves behind for the next on
its connection is plain data of the WebSocket core's: ``labkit.server.wscore.conversation``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.api.items import Item
from labkit.api.requests import CreateRequest
from labkit.api.stages import Source
from labkit.designs import Design, Plan
from labkit.engine.catalogue import ModelSpec
from labkit.engine.inference import Replica
from labkit.engine.policies import ModelAction, Policy, TurnContext
from labkit.engine.render import PrefixHasher, TokenBuffer
from labkit.server.stores.traces import Trace
from labkit.server.wscore.conversation import Conversation


@dataclass
class StopSignal:
    """A response's own signal to stop for steering input: set from outside the pipeline, read by
    the sampler at each safe output boundary (``labkit.server.stages.sampling.SAFE_BOUNDARIES``).
    In WebSocket mode the asyncio layer sets it when the connection's rules accept a steer for
    this response (``Interrupt``); nothing else does, so a response over HTTP never stops for one.

    >>> stop = StopSignal(); stop.requested, (stop.request(), stop.requested)[1]
    (False, True)
    """

    requested: bool = False

    def request(self) -> None:
        self.requested = True


# Reads what a client sent onto the run (raising ``APIError`` if it is not valid); returns its items.
Accept = Callable[["ResponseRun", Any], Sequence[Item]]


@dataclass
class ResponseRun:
    """One response on its way through the pipeline: what every stage reads and writes."""

    design: Design
    owner: str
    trace: Trace = field(default_factory=Trace)
    # The connection cache's one answer for this create (``ConnectionCache.serve``, asked once,
    # when it started): the cached conversation it continues, or None. Every stage reads it here.
    parent: Conversation | None = None
    pinned: Replica | None = None  # a connection's replica
    stop: StopSignal = field(default_factory=StopSignal)  # steering input waits: stop at a boundary
    compacted: list[dict[str, Any]] | None = None  # context_management: the window after compaction
    # What the client sent, until validation takes it: a create's body, a compaction's, or the
    # items an appended rollout was sent; and how validation reads it (None: as a create's body).
    body: Any = None
    accept: Accept | None = None
    req: CreateRequest | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    new_items: list[dict[str, Any]] = field(default_factory=list)
    appended: list[dict[str, Any]] = field(default_factory=list)  # appended rollouts: earlier segments
    appending: list[dict[str, Any]] = field(default_factory=list)  # ... input accepted, not yet rendered
    settled: int = 0  # outputs already moved into ``appended``
    source: Source = Source.NONE  # where hydration found the history
    # this turn's rendering, and its hasher: see labkit.server.stages.render_cache
    buffer: TokenBuffer | None = None
    hasher: PrefixHasher | None = None
    model: ModelSpec | None = None
    replica: Replica | None = None
    policy: Policy | None = None
    response: dict[str, Any] = field(default_factory=dict)
    output_ids: list[list[int]] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    produced: int = 0
    billed: bool = False
    departed: bool = False  # the current segment's first event has left (its downlink is paid)

    @property
    def plan(self) -> Plan:
        return self.design.plan

    def depart(self) -> bool:
        """True the first time it is asked in a segment: the downlink is paid once per segment."""
        first, self.departed = not self.departed, True
        return first

    def next_segment(self) -> None:
        """An appended rollout resumes: later spans belong to the next segment (turn)."""
        self.trace.segment += 1
        self.departed = False

    @property
    def items(self) -> list[dict[str, Any]]:
        """The input of this turn: history, new items and (appended rollouts) earlier segments;
        after a compaction (``context_management``), the compacted window in place of the first two."""
        if self.compacted is not None:
            return self.compacted + self.appended
        return self.history + self.new_items + self.appended

    def items_from(self, start: int) -> list[dict[str, Any]]:
        """``items[start:]``, without joining the history first (only the part asked for is read)."""
        window = (self.compacted,) if self.compacted is not None else (self.history, self.new_items)
        parts, result = (*window, self.appended), []
        for part in parts:
            if start < len(part):
                result += part[start:]
            start = max(0, start - len(part))
        return result

    def unsettled(self) -> tuple[list[dict[str, Any]], list[list[int]]]:
        """Outputs (and their sampled ids) not yet part of ``items``."""
        return self.response["output"][self.settled :], self.output_ids[self.settled :]

    def conversation(self) -> list[dict[str, Any]]:
        return self.items + self.unsettled()[0]

    def next_actions(self) -> list[ModelAction]:
        """What the policy has the model do next, given the conversation so far."""
        assert self.req is not None and self.policy is not None
        context = TurnContext(
            items=self.conversation(),
            tools=self.req.tools,
            tool_choice=self.req.tool_choice_wire,
            max_output_tokens=self.req.max_output_tokens,
        )
        return self.policy.act(context)

    def take_appending(self) -> list[dict[str, Any]]:
        """The input accepted for the next segment, now part of ``items`` (after the outputs it answers)."""
        taken, self.appending = self.appending, []
        self.appended += taken
        return taken

    def left_behind(self) -> Conversation:
        """What a finished response leaves for the next on its connection: the connection cache's
        entry (its rendering's rules: ``labkit.server.stages.render_cache``)."""
        assert self.buffer is not None and self.model is not None and self.replica is not None
        return Conversation(self.response, self.items, self.buffer, self.model, self.replica, self.hasher)

    @property
    def from_connection_cache(self) -> bool:
        """Whether this follow-up is served from the connection cache: the cache's answer, as given."""
        return self.parent is not None
