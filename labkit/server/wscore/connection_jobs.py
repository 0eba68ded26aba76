"""What a WebSocket-mode connection holds and what it answers with, as plain data: the jobs on
its lanes, the steering input it has accepted, the input handed to a running rollout, the
responses it remembers as ended, the actions it returns (``Send``, ``Start``, ``Interrupt``,
``InputReady``, ``Arrive``) and the outcomes it is fed (``Finished``, ``Failed``). The rules that
move them are ``labkit.server.wscore.connection``'s.

The I/O layer reads a ``Job`` for what it is to run (its lane, its body, the cache's answer), never
for what the core keeps on it meanwhile (its steers, its held input): that reaches it as actions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from labkit.api import steering
from labkit.api.items import Item
from labkit.connection_cache import Lane
from labkit.server.wscore.conversation import Conversation

# ---------------------------------------------------------------- what the connection holds


@dataclass
class Steer:
    """One accepted ``response.steer``: its id, its target, its input (as items and as sent), and
    its frame's bytes, held until it is committed or returned (``labkit.server.wscore.held_bytes``)."""

    id: str
    target: str
    items: list[Item]
    raw: Any
    size: int


@dataclass(frozen=True)
class HeldInput:
    """Input handed to a running response (a ``response.append``'s or ``response.inject``'s, as
    sent) and not yet taken, with its frame's bytes."""

    items: list[Any]
    size: int


@dataclass(eq=False)
class Job:
    """One create on its way: queued, then running on its lane, then finished."""

    lane: Lane
    body: dict[str, Any]
    size: int  # its frame's bytes, held (``labkit.server.wscore.held_bytes``) until it starts
    behind: bool  # it waited behind another create on its lane (counted against ``max_queued``)
    parent: Conversation | None = None  # the connection cache's answer, given when it starts
    committing: list[Steer] = field(default_factory=list)  # steering input this create commits
    automatic: bool = False  # a steered response's successor, created by the server
    response_id: str | None = None  # once created
    steers: list[Steer] = field(default_factory=list)  # accepted for this response while it runs
    not_steerable: str | None = None  # why it cannot be steered (a key of connection.NOT_STEERABLE)
    # Input handed to it (response.append or response.inject, as sent) and not yet taken: the one
    # place it is kept until ``Connection.take_input`` gives it to the rollout.
    inputs: deque[HeldInput] = field(default_factory=deque)

    @property
    def stream_id(self) -> str | None:
        return self.lane


class Ended(Enum):
    """What a finished response still takes: how a late steer is answered."""

    COMPLETED = steering.RESPONSE_ALREADY_COMPLETED
    NOT_ACTIVE = steering.RESPONSE_NOT_ACTIVE
    WAITING = "waiting"  # completed on client-owned calls: steering input waits for their results


@dataclass
class EndedResponse:
    lane: Lane
    state: Ended
    calls: list[Item] = field(default_factory=list)  # the client-owned calls it stopped on
    waiting: list[Steer] = field(default_factory=list)  # steering input queued for its continuation


@dataclass
class LaneState:
    queue: deque[Job] = field(default_factory=deque)
    current: Job | None = None  # running, or waiting for a slot


# ---------------------------------------------------------------- what the connection returns


@dataclass(frozen=True)
class Send:
    event: dict[str, Any]


@dataclass(frozen=True)
class Start:
    job: Job


@dataclass(frozen=True)
class Interrupt:
    """A steer was accepted for ``job``, which is running: stop it at its next safe output boundary
    (``labkit.server.stages.sampling.SAFE_BOUNDARIES``). ``steer`` is the accepted steer's id."""

    job: Job
    steer: str


@dataclass(frozen=True)
class Queued:
    """A steer was accepted for a response that ended on its client's function calls: it waits for
    the create that continues that response, which commits it (``Job.committing``). ``steer`` is
    the accepted steer's id."""

    steer: str


@dataclass(frozen=True)
class InputReady:
    """Input was handed to the appended rollout ``job`` is running: wake it, if it waits, to take
    it from the connection (``Connection.take_input``)."""

    job: Job


@dataclass(frozen=True)
class Arrive:
    """A ``response.steer`` that takes effect once it has crossed the network (the uplink stage a
    create pays too): then hand it to ``Connection.steer``, with its frame's ``size`` in bytes.
    The crossing is a span of the response the steer interrupts, or of the create that commits it
    (``Queued``); a steer refused has no response, and its crossing no trace."""

    payload: dict[str, Any]
    size: int


Action = Send | Start | Interrupt | Queued | InputReady | Arrive


@dataclass(frozen=True)
class Finished:
    """A response that ran to its terminal event: what it leaves, how it ended, and the
    client-owned calls it stopped on (empty if it stopped otherwise)."""

    conversation: Conversation
    status: str
    calls: list[Item] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    """A create that did not finish, refused before ``response.created`` or failed after it.
    ``evict``: whether the failure evicts what it continued (a per-key cap's refusal does not:
    nothing of the create was looked at)."""

    evict: bool = True


Outcome = Finished | Failed
