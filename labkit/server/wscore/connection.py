"""WebSocket mode's rules, without I/O: what one connection does with each client frame and each
response's outcome.

``Connection`` is a state machine in the manner of the ``websockets`` library's protocol
objects: it is fed what happened (a frame the client sent, a response created, a response
finished) and returns what to do about it, as actions:

- ``Send(event)``: put this event on the socket (an error, a steering event);
- ``Start(job)``: run this create now, on its lane (``job.parent`` is the connection cache's
  answer for it, ``job.body`` the create with any queued steering input prepended);
- ``Interrupt(job, steer)``: a steer was accepted for the response ``job`` is running: stop it at
  its next safe output boundary (the I/O layer sets that response's own stop signal);
- ``Queued(steer)``: a steer was accepted for a response that ended on its client's calls; the
  create that continues it commits it (``job.committing``);
- ``InputReady(job)``: input (a ``response.append``'s or a ``response.inject``'s) was handed to
  the appended rollout ``job`` is running; the rollout takes it from here with ``take_input``,
  which lets go of the bytes it held. The input is kept in one place, ``job.inputs``;
- ``Arrive(payload)``: a steer on its way; once it has crossed the network, give it to ``steer``.

Those actions, the jobs they carry and the outcomes it is fed are plain data, in
``labkit.server.wscore.connection_jobs``.

It never awaits, never touches a socket, and holds no clock: ``labkit.server.ws.websocket`` is the
asyncio loop around it, which runs each ``Start`` through the pipeline and reports back with
``created`` and ``finished``. So every rule here is tested by feeding it events
(``tests/server/wscore/test_connection.py``), and only the wire by real sockets.

The rules (docs/protocol.md §3):

- **Lanes.** A ``stream_id`` names a lane (``limits.MAX_LANES`` named lanes, plus the default
  one); a lane runs its creates one at a time, in order; at most ``limits.MAX_IN_FLIGHT`` run at
  once on a connection. A create behind another waits, up to ``max_queued`` of them; past that
  it is refused (``websocket_queue_full``). Every error about a lane carries its ``stream_id``.
- **Bytes held** (``labkit.server.wscore.held_bytes``): every frame not used yet (a create until it
  starts, steering input until its response is created, injected or appended input until the
  rollout takes it) counts toward ``max_queued_bytes`` of the connection and toward its key's
  bound; a frame past either is refused like one past a count (``websocket_queue_full``, or
  ``response.steer.failed`` ``too_many_pending_steers``), and nothing else changes.
- **The connection cache** (``labkit.connection_cache``): forks across lanes, and what
  a failure evicts. With ``labkit serve --connection-cache``, a learner's class answers the same
  three questions, behind a guard (``labkit.server.ws.learner_cache``).
- **Steering** (``labkit.api.steering``): a ``response.steer`` is checked, given an id and
  queued on its target, the response running on this connection that it names, and the answer
  says to interrupt it (``Interrupt``). The target stops at its next safe output boundary
  (``labkit.server.stages.sampling``) and ends ``incomplete`` (``steered``); an automatic
  successor, the target's create with the steering input as its input, then runs first on the
  lane, from the connection cache. A target that stops on client-owned function calls keeps the
  input queued (``response.steer.pending``) until the client's create that continues it on the
  same lane, whose input it is put before.
- **Injecting** (``labkit.api.inject``, on a connection whose upgrade named the multi-agent
  beta): a ``response.inject`` is checked, then handed to its target, the response it names,
  on whatever lane. An appended rollout takes it (``take_input``) when it waits for tool
  outputs; any other response, and a rollout that ends first, answers it with
  ``response.inject.failed`` (``response_already_completed``) when it ends; an unknown response
  with ``response_not_found``. Either way the input is returned as it was sent, within
  ``max_echo_bytes`` (``labkit.api.echo``), as a refused steer's is.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

from cachetools import FIFOCache

from labkit.api import inject, safejson, steering
from labkit.api.errors import APIError, invalid_request, rate_limited
from labkit.api.event_types import RESPONSE_APPEND, RESPONSE_CREATE, RESPONSE_INJECT, RESPONSE_STEER
from labkit.api.ids import new_id
from labkit.api.items import Item
from labkit.api.requests import parse_item
from labkit.connection_cache import Cache, ConnectionCache, Lane
from labkit.designs import Design
from labkit.limits import (
    ECHO_SHARE_OF_UNREAD,
    MAX_IN_FLIGHT,
    MAX_LANES,
    MAX_PENDING_STEERS,
    MAX_QUEUED_BYTES,
    MAX_QUEUED_CREATES,
    MAX_UNREAD_BYTES,
)
from labkit.server.wscore.connection_jobs import (
    Action,
    Arrive,
    Ended,
    EndedResponse,
    Finished,
    HeldInput,
    InputReady,
    Interrupt,
    Job,
    LaneState,
    Outcome,
    Queued,
    Send,
    Start,
    Steer,
)
from labkit.server.wscore.conversation import Conversation
from labkit.server.wscore.held_bytes import HeldBytes
from labkit.server.wscore.lanes import check_stream_id

ENDED_KEPT = 1024  # ended responses a connection remembers, to say why a steer came too late

# Why a response cannot be steered, by what it runs as (``response.steer.failed``, steering_not_supported).
NOT_STEERABLE = {
    "appended": "An appended rollout is one response for a whole rollout; steering would end it and "
    "start a successor. Send the user's message in response.append at the next pause instead.",
    "injected": "This response waits for its tool outputs and goes on sampling (response.inject); "
    "steering would end it and start a successor. Inject the user's message with the tool outputs instead.",
    "no_cache": "This connection's design keeps no connection cache, and a steered response's successor "
    "continues from it. Use a design with the connection cache (websocket).",
    "compaction": "A response with context_management compaction cannot be steered.",
}


# ---------------------------------------------------------------- the connection


class _Ended(FIFOCache):
    """The ended responses a connection remembers, the oldest forgotten first; ``forget`` lets
    go of what a forgotten one still held (no continuation can carry it any more)."""

    def __init__(self, maxsize: int, forget: Callable[[EndedResponse], None]) -> None:
        super().__init__(maxsize)
        self._forget = forget

    def popitem(self) -> tuple[str, EndedResponse]:
        key, ended = super().popitem()
        self._forget(ended)
        return key, ended


class Connection:
    """The rules of one WebSocket connection (see the module's docstring)."""

    def __init__(
        self,
        design: Design,
        *,
        max_queued: int = MAX_QUEUED_CREATES,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        max_lanes: int = MAX_LANES,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_pending_steers: int = MAX_PENDING_STEERS,
        max_echo_bytes: int = MAX_UNREAD_BYTES // ECHO_SHARE_OF_UNREAD,
        held_by_key: HeldBytes | None = None,
        inject: bool = False,
        learner_cache: Callable[[], Cache[Conversation]] | None = None,
    ) -> None:
        self.design = design
        # The upgrade named the multi-agent beta: response.inject is this connection's wire, and
        # an appended rollout waits for it (no response.done, no response.append).
        self.inject = inject
        self.cache: Cache[Conversation]  # labkit's, or a learner's behind its guard (``GuardedCache``)
        if learner_cache is not None and design.connection_cache:
            # labkit serve --connection-cache: a learner's class behind its guard, made by the
            # I/O layer (loading a learner's file and its deadlines are no business of the core's)
            self.cache = learner_cache()
        else:
            self.cache = ConnectionCache(enabled=design.connection_cache)
        self.max_queued = max_queued
        self.max_lanes, self.max_in_flight = max_lanes, max_in_flight
        self.max_pending_steers, self.max_echo_bytes = max_pending_steers, max_echo_bytes
        # The frames not used yet (creates, steering input, injected input), within its key's too.
        self.held = HeldBytes(max_queued_bytes, "this connection", held_by_key)
        self.lanes: dict[Lane, LaneState] = {}
        self.queued = 0  # creates waiting behind another on their lane
        self.running = 0
        self.waiting_for_slot: deque[Job] = deque()  # lanes' current creates, past max_in_flight
        self.active: dict[str, Job] = {}  # created and not finished, by response id
        self.ended = _Ended(ENDED_KEPT, forget=lambda ended: self._let_go(ended.waiting))
        self._steer_numbers = itertools.count()  # steering events' own sequence

    # ------------------------------------------------------------ what the client sends

    def receive(self, frame: str | bytes) -> list[Action]:
        """One client frame; a bad one is answered with an error event, never anything worse."""
        try:
            payload = safejson.loads(frame, what="the WebSocket frame")
        except APIError as err:
            err.code = err.code or "invalid_json"
            return [Send(err.ws_event())]
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            err = invalid_request(
                "A WebSocket frame must be a JSON object with a 'type'.", param="type", code="invalid_value"
            )
            return [Send(err.ws_event())]
        kind = payload["type"]
        try:
            if kind == RESPONSE_CREATE:
                return self.create(payload, len(frame))
            if kind == RESPONSE_STEER:
                return [Arrive(payload, len(frame))]
            if kind == RESPONSE_INJECT and self.inject:
                return self.take_inject(payload, len(frame))
            if kind == RESPONSE_APPEND and self.design.appended and not self.inject:
                return self.append(payload, len(frame))
            raise invalid_request(_unsupported(kind, self.inject), param="type", code="unknown_event")
        except APIError as err:
            return [Send(err.ws_event())]

    def create(self, payload: dict[str, Any], size: int) -> list[Action]:
        stream_id = payload.get("stream_id")
        check_stream_id(stream_id)  # a malformed name is no lane's: its error carries none
        lane = self.lanes.get(stream_id)
        if lane is None:
            if stream_id is not None and sum(key is not None for key in self.lanes) >= self.max_lanes:
                err = invalid_request(
                    f"This connection already has {self.max_lanes} streams.",
                    param="stream_id",
                    code="websocket_stream_limit_reached",
                )
                return [Send(err.ws_event(stream_id))]
            lane = self.lanes[stream_id] = LaneState()
        behind = lane.current is not None or bool(lane.queue)  # an idle lane starts it at once
        if behind and self.queued >= self.max_queued:
            full = rate_limited(
                f"Too many responses waiting on this connection (at most {self.max_queued}). "
                "Wait for one to finish, or use another stream.",
                code="websocket_queue_full",
            )
            return [Send(full.ws_event(stream_id))]
        if not self.held.take(size):
            return [Send(self._too_much(size, "Wait for a response to start or finish.").ws_event(stream_id))]
        body = {k: v for k, v in payload.items() if k not in ("type", "stream_id", "stream")}
        job = Job(stream_id, body, size, behind)
        self.queued += behind
        lane.queue.append(job)
        return self._advance(stream_id)

    def _too_much(self, size: int, then: str) -> APIError:
        """The refusal of a frame of ``size`` bytes past what the connection, or its key, holds."""
        return rate_limited(
            f"This frame ({size:,} bytes) is refused: {self.held.refusal(size)}. {then}",
            code="websocket_queue_full",
        )

    def append(self, payload: dict[str, Any], size: int) -> list[Action]:
        """labkit extension: tool results for the appended rollout paused on the payload's lane,
        refused unless that lane's rollout is the one it names and its items are items; at
        most ``max_queued`` appends wait."""
        stream_id = payload.get("stream_id")
        check_stream_id(stream_id)
        lane = self.lanes.get(stream_id)
        job = lane.current if lane is not None else None
        if job is None or job.response_id is None:
            raise invalid_request("No response on this connection is waiting for response.append.")
        assert lane is not None
        if payload.get("response_id") != job.response_id:
            raise invalid_request(
                f"Response '{payload.get('response_id')}' is not waiting for response.append on this "
                f"stream; '{job.response_id}' is.",
                param="response_id",
            )
        items = payload.get("input")
        if not isinstance(items, list):
            raise invalid_request("'input' of response.append must be a list of items.", param="input")
        for i, item in enumerate(items):
            parse_item(item, f"input[{i}]")  # refuse bad items now; the rollout keeps waiting
        return self._hand_over(job, items, size, "appends", "this stream")

    def take_inject(self, payload: dict[str, Any], size: int) -> list[Action]:
        """The multi-agent beta: input for the response the payload names, on any lane; refused
        (an error) unless its items are items; returned (``response.inject.failed``) if that
        response is none this connection runs, or has ended."""
        target, raw = inject.parse_inject(payload)
        job = self.active.get(target)
        if job is not None:
            return self._hand_over(job, raw, size, "injects", "this response")
        ended = self.ended.get(target)
        if ended is None:
            message = f"No response '{target}' is running on this connection."
            return [self._returned(inject.RESPONSE_NOT_FOUND, message, target, raw, None)]
        message = f"Response '{target}' has finished and takes no more input."
        if ended.state is Ended.WAITING:  # a websocket-mode response ends on its calls
            message += " Send the tool outputs in a response.create with previous_response_id."
        return [self._returned(inject.RESPONSE_ALREADY_COMPLETED, message, target, raw, ended.lane)]

    def _returned(self, code: str, message: str, target: str, raw: list[Any], lane: Lane) -> Send:
        """``response.inject.failed``: injected input not committed, returned as it was sent."""
        failed = inject.failed(
            code, message, target, raw, self._number(), lane, echo_limit=self.max_echo_bytes
        )
        return Send(failed)

    def _hand_over(self, job: Job, items: list[Any], size: int, what: str, where: str) -> list[Action]:
        """Input for a running response, kept until it is taken, up to a point (a count, and the
        bytes held). Only an appended rollout takes any: another response ends on its calls, and
        returns it then (``finished``)."""
        if len(job.inputs) >= self.max_queued:
            raise rate_limited(
                f"Too many {what} waiting on {where} (at most {self.max_queued}).",
                code="websocket_queue_full",
            )
        if not self.held.take(size):
            raise self._too_much(size, "Wait for the rollout to take what it was sent.")
        job.inputs.append(HeldInput(items, size))
        return [InputReady(job)] if self.design.appended else []

    def take_input(self, job: Job) -> list[Any] | None:
        """The oldest input handed to ``job``'s rollout, as sent, now taken (its bytes no longer
        held); None if none waits."""
        if not job.inputs:
            return None
        taken = job.inputs.popleft()
        self.held.give_back(taken.size)
        return taken.items

    # ------------------------------------------------------------ steering

    def steer(self, payload: dict[str, Any], size: int | None = None) -> list[Action]:
        """A ``response.steer`` (its frame ``size`` bytes, measured from ``payload`` if not given):
        accepted onto its target (a running one is interrupted: ``Interrupt``), or failed with the
        input returned."""
        size = len(safejson.dumps(payload)) if size is None else size
        target, raw = payload.get("previous_response_id"), payload.get("input")
        try:
            target, items = steering.parse_steer(payload)
            job = self.active.get(target)
            if job is not None:
                steer = self._accept(job.steers, target, items, raw, size, job.not_steerable)
                return [self._accepted(steer, job.lane), Interrupt(job, steer.id)]
            ended = self.ended.get(target)
            if ended is None:
                raise steering.SteerRefused(
                    f"No response '{target}' is running on this connection.", steering.RESPONSE_NOT_FOUND
                )
            if ended.state is not Ended.WAITING:
                raise steering.SteerRefused(_too_late(target, ended.state), ended.state.value)
            steer = self._accept(ended.waiting, target, items, raw, size, None)
            return [self._accepted(steer, ended.lane), *self._pending([steer], ended), Queued(steer.id)]
        except steering.SteerRefused as refused:
            known = self.active.get(target) or self.ended.get(target) if isinstance(target, str) else None
            lane = known.lane if known is not None else None
            event = steering.failed(
                refused.code,
                refused.message,
                target,
                raw,
                self._number(),
                stream_id=lane,
                echo_limit=self.max_echo_bytes,
            )
            return [Send(event)]

    def _accept(
        self,
        queue: list[Steer],
        target: str,
        items: list[Item],
        raw: Any,
        size: int,
        not_steerable: str | None,
    ) -> Steer:
        """The steer queued on its target, its bytes held; refused (``SteerRefused``) past a bound."""
        if not_steerable is not None:
            raise steering.SteerRefused(NOT_STEERABLE[not_steerable], steering.STEERING_NOT_SUPPORTED)
        if len(queue) >= self.max_pending_steers:
            raise steering.SteerRefused(
                f"Response '{target}' already has {self.max_pending_steers} steering inputs pending "
                f"(labkit's cap). Wait for the successor's response.created.",
                steering.TOO_MANY_PENDING_STEERS,
            )
        if not self.held.take(size):
            raise steering.SteerRefused(
                f"This steer ({size:,} bytes) is refused: {self.held.refusal(size)}. "
                "Wait for the successor's response.created.",
                steering.TOO_MANY_PENDING_STEERS,
            )
        steer = Steer(new_id("steer"), target, items, raw, size)
        queue.append(steer)
        return steer

    def _accepted(self, steer: Steer, lane: Lane) -> Send:
        return Send(steering.accepted(steer.id, steer.target, self._number(), lane))

    def _pending(self, steers: list[Steer], ended: EndedResponse) -> list[Action]:
        return [
            Send(steering.pending(s.id, s.target, ended.calls, self._number(), ended.lane)) for s in steers
        ]

    def _uncommitted(self, steers: list[Steer], code: str, message: str, lane: Lane) -> list[Action]:
        """Steering input that will never be committed, returned to the client (and no longer held)."""
        self._let_go(steers)
        return [
            Send(
                steering.failed(
                    code,
                    message,
                    s.target,
                    s.raw,
                    self._number(),
                    steer_id=s.id,
                    stream_id=lane,
                    echo_limit=self.max_echo_bytes,
                )
            )
            for s in steers
        ]

    def _let_go(self, steers: list[Steer]) -> None:
        """Steering input committed, returned or forgotten: no longer held."""
        self.held.give_back(sum(steer.size for steer in steers))

    def _number(self) -> int:
        return next(self._steer_numbers)

    # ------------------------------------------------------------ what the responses report

    def created(self, job: Job, response_id: str) -> None:
        """``job``'s response exists (``response.created`` goes out next): the commit point of the
        steering input it carries, and from now on a target for steering."""
        job.response_id = response_id
        self._let_go(job.committing)
        job.committing = []
        self.active[response_id] = job

    def finished(self, job: Job, outcome: Outcome) -> list[Action]:
        """``job`` is over: keep or evict, route its steering input, start what comes next."""
        actions: list[Action] = []
        lane = self.lanes[job.lane]
        lane.current = None
        self.running -= 1
        actions += self._not_taken(job, outcome)
        if job.response_id is not None:
            self.active.pop(job.response_id, None)
        previous = job.body.get("previous_response_id")
        if isinstance(outcome, Finished):
            self.cache.keep(job.lane, outcome.conversation)
            actions += self._after(job, outcome)
        else:
            if outcome.evict:
                self.cache.failed(job.lane, previous)
            if job.committing:  # refused before its response.created: the steering input was not used
                message = "The response that was to carry this steering input could not be created."
                actions += self._uncommitted(
                    job.committing, steering.SUCCESSOR_CREATION_FAILED, message, job.lane
                )
            if job.steers:
                message = "The response failed before it could take this steering input."
                actions += self._uncommitted(job.steers, steering.RESPONSE_NOT_ACTIVE, message, job.lane)
            if job.response_id is not None:
                self._remember(job.response_id, EndedResponse(job.lane, Ended.NOT_ACTIVE))
        return actions + self._advance(job.lane) + self._fill_slots()

    def _after(self, job: Job, outcome: Finished) -> list[Action]:
        """A finished response's steering input: on to a successor, or waiting for tool results."""
        assert job.response_id is not None
        if outcome.calls:
            ended = EndedResponse(job.lane, Ended.WAITING, outcome.calls, job.steers)
            self._remember(job.response_id, ended)
            return self._pending(job.steers, ended)
        state = Ended.COMPLETED if outcome.status == "completed" and not job.steers else Ended.NOT_ACTIVE
        self._remember(job.response_id, EndedResponse(job.lane, state))
        if job.steers:  # the automatic successor: first on the lane, before any queued create
            settings = {k: v for k, v in job.body.items() if k not in ("input", "previous_response_id")}
            body = {**settings, "previous_response_id": job.response_id, "input": _inputs(job.steers)}
            successor = Job(job.lane, body, 0, False, committing=job.steers, automatic=True)
            self.lanes[job.lane].queue.appendleft(successor)
        return []

    def _not_taken(self, job: Job, outcome: Outcome) -> list[Action]:
        """Injected input the response ended without taking, returned as it was sent (a
        ``response.append`` sent too late is dropped: the prototype's wire has no such answer)."""
        left, job.inputs = list(job.inputs), deque()
        self.held.give_back(sum(held.size for held in left))
        if not self.inject or job.response_id is None:
            return []
        status = outcome.status if isinstance(outcome, Finished) else "failed"
        message = f"Response '{job.response_id}' ended ({status}) before it took this input."
        code, target = inject.RESPONSE_ALREADY_COMPLETED, job.response_id
        return [self._returned(code, message, target, held.items, job.lane) for held in left]

    def _remember(self, response_id: str, ended: EndedResponse) -> None:
        self.ended[response_id] = ended  # the oldest past ENDED_KEPT is forgotten (_Ended)

    # ------------------------------------------------------------ starting creates

    def _advance(self, key: Lane) -> list[Action]:
        """The lane's next create becomes its current one, and starts if a slot is free."""
        lane = self.lanes[key]
        if lane.current is not None or not lane.queue:
            return []
        job = lane.current = lane.queue.popleft()
        self.queued -= job.behind
        if self.running >= self.max_in_flight:
            self.waiting_for_slot.append(job)
            return []
        return [self._start(job)]

    def _fill_slots(self) -> list[Action]:
        started: list[Action] = []
        while self.waiting_for_slot and self.running < self.max_in_flight:
            started.append(self._start(self.waiting_for_slot.popleft()))
        return started

    def _start(self, job: Job) -> Start:
        """Run ``job`` now: the cache's one answer for it, and the steering input it takes."""
        self.running += 1
        self.held.give_back(job.size)
        previous = job.body.get("previous_response_id")
        waiting = self.ended.get(previous) if isinstance(previous, str) else None
        if waiting is not None and waiting.state is Ended.WAITING and waiting.lane == job.lane:
            # The client's continuation of a response that stopped for tool results: the steering
            # input queued on it goes first, in the order it was sent (committed at response.created).
            job.committing, waiting.waiting = waiting.waiting, []
            waiting.state = Ended.COMPLETED
            if job.committing:
                own = job.body.get("input")
                own = [{"type": "message", "role": "user", "content": own}] if isinstance(own, str) else own
                job.body = {**job.body, "input": _inputs(job.committing) + list(own or [])}
        job.parent = self.cache.serve(previous)
        job.not_steerable = self._not_steerable(job.body)
        return Start(job)

    def _not_steerable(self, body: dict[str, Any]) -> str | None:
        if self.design.appended:
            return "injected" if self.inject else "appended"
        if not self.design.connection_cache:
            return "no_cache"
        if body.get("context_management"):
            return "compaction"
        return None


def _inputs(steers: list[Steer]) -> list[Item]:
    return [item for steer in steers for item in steer.items]


def _unsupported(kind: str, injecting: bool) -> str:
    """The message for a frame this connection does not take, with what it may have meant."""
    message = f"Unsupported event type '{kind}'."
    if kind == RESPONSE_INJECT:
        beta = inject.MULTI_AGENT_BETA
        message += f" It belongs to the {beta} beta: name the beta in the upgrade's OpenAI-Beta header."
    elif kind == RESPONSE_APPEND and injecting:
        message += " This connection named the multi-agent beta: send the tool outputs with response.inject."
    return message


def _too_late(target: str, state: Ended) -> str:
    if state is Ended.COMPLETED:
        return f"Response '{target}' has completed and takes no more steering input."
    return f"Response '{target}' is no longer running and takes no steering input."
