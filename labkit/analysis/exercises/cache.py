"""Exercise 3 (notebook 03): the connection cache, written by the learner, run inside the server.

The learner writes the class a WebSocket connection asks once per ``response.create``: the
same three methods labkit's own has (``serve``, ``keep``, ``failed``). A server started with it
(``lab.server(connection_cache=MyCache)``, i.e. ``labkit serve --connection-cache``) gives every
WebSocket connection an instance, behind a guard: a method that raises, hangs, or hands over
an entry that is not the one asked for, or one changed since it was kept (its history trimmed,
say), is stopped there, and the connection goes on with labkit's cache (docs/protocol.md, "A
learner's connection cache").

``check_connection_cache`` drives the official SDK's ``responses.connect()`` through the
contract's cases and reads, in each response's trace, where its history came from: one
sentence per rule, the broken ones first (a ``Verdict``). ``delivered`` says how much of
labkit's saving the learner's cache delivered in a race.

An entry is what ``keep`` is given: the conversation a finished response leaves behind.
``response_id(entry)`` is the id of the response it ends with.

    >>> class Entry:  # in the server, an entry is the server's own record of a conversation
    ...     response = {"id": "resp_1"}
    >>> cache = ReferenceCache(); cache.keep("a", Entry()); response_id(cache.serve("resp_1"))
    'resp_1'
    >>> cache.failed("b", "resp_1"); cache.serve("resp_1") is not None  # a fork failed elsewhere
    True
    >>> cache.failed("a", "resp_1"); cache.serve("resp_1") is None  # its own lane's failed: evicted
    True
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labkit.analysis.exercises.common import Verdict
from labkit.analysis.precision import percent, with_noise
from labkit.connection_cache import ConnectionCache
from labkit.connection_cache import response_id as response_id  # the learner reads an entry's id with it

if TYPE_CHECKING:
    from labkit.analysis.paired import Saving

MODEL = "labkit-burst"  # the fastest model: the check is about the cache, not decoding
WHAT = "connection cache"
# A continuation that fails once its cache answer is given: a tool output for a call nobody made.
BROKEN = [{"type": "function_call_output", "call_id": "call_nobody_made", "output": "?"}]
NEXT = [{"role": "user", "content": "Go on."}]


class ReferenceCache(ConnectionCache):
    """labkit's connection cache, the one the server's WebSocket core asks, under the exercise's
    name: each lane's latest entry, found by response id from any lane; a failure evicts only what
    it continued on its own lane."""


def cache_probe(cache_class: type) -> None:
    """``mine_or_reference``'s probe: raises ``NotImplementedError`` while any of the three
    methods is still the skeleton's body. It reads the source and calls nothing: a method that
    never returns must not hold up the notebook (the server stops it, behind its guard).

    >>> class Half:
    ...     def serve(self, previous_response_id): return None
    ...     def keep(self, lane, entry): raise NotImplementedError("write keep")
    ...     def failed(self, lane, previous_response_id): pass
    >>> cache_probe(Half)
    Traceback (most recent call last):
    ...
    NotImplementedError: keep is still the skeleton
    """
    for method in ("serve", "keep", "failed"):
        if _still_skeleton(getattr(cache_class, method, None)):
            raise NotImplementedError(f"{method} is still the skeleton")


def _still_skeleton(fn: Any) -> bool:
    """Whether ``fn``'s body (its docstring aside) is only ``raise NotImplementedError``."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False  # no source to read: written some other way
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        return False
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


# ---------------------------------------------------------------- the contract check, on the wire


@dataclass
class Answer:
    """One create's outcome: the response, or the error's code; and its trace's hydration."""

    response: Any = None
    error: str | None = None
    hydration: dict[str, Any] = field(default_factory=dict)
    new_items: int = 0
    classifier_items: int | None = None

    @property
    def id(self) -> str:
        """The response's id (one no response has, if it failed: a follow-up of it is a miss)."""
        return self.response.id if self.response is not None else "resp_that_failed"

    @property
    def source(self) -> str | None:
        return self.hydration.get("source")

    @property
    def yours(self) -> bool:
        """Whether the learner's cache gave this answer (no fault on the connection before it)."""
        return self.hydration.get("learner_cache", "yours") == "yours"

    @property
    def hit(self) -> bool:
        return self.response is not None and self.source == "connection_cache"


class Wire:
    """The SDK's connections to the learner's server, and each create's trace."""

    def __init__(self, base_url: str, api_key: str) -> None:
        from openai import OpenAI

        self.base_url, self.api_key = base_url, api_key
        self.client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        self.answers: list[Answer] = []

    def create(self, conn: Any, *, store: bool, lane: str | None = None, **body: Any) -> Answer:
        extra = {"stream_id": lane} if lane is not None else {}
        body.setdefault("input", NEXT)
        conn.response.create(model=MODEL, store=store, **extra, **body)
        sent = body["input"]
        answer = Answer(new_items=len(sent) if isinstance(sent, list) else 1)
        for event in conn:
            if event.type == "error":
                answer.error = getattr(event.error, "code", None) or "error"
                break
            if event.type in ("response.completed", "response.failed", "response.incomplete"):
                if event.type == "response.completed":
                    answer.response = event.response
                else:
                    answer.error = event.type
                break
        self.answers.append(answer)
        return answer

    def read_traces(self) -> None:
        """Every completed answer's hydration span and classifier's items, from the server."""
        from labkit.client.agent import fetch_spans

        done = [a for a in self.answers if a.response is not None]
        spans = fetch_spans(self.base_url, [a.response.id for a in done], self.api_key)
        for answer in done:
            for span in spans[answer.response.id]:
                if span["stage"] == "hydration":
                    answer.hydration = span["detail"]
                elif span["stage"] == "input_safety":
                    answer.classifier_items = span["items"]

    def faults(self) -> list[str]:
        return [a.hydration["cache_fault"] for a in self.answers if "cache_fault" in a.hydration]


@dataclass
class Rules:
    """The rules' outcomes, in the order they are told: kept, broken, or not judged (a fault
    before it meant labkit's cache answered)."""

    kept: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    def judge(self, answers: list[Answer], right: bool, kept: str, broken: str, when: bool = True) -> None:
        """``when``: the rule can be told apart from an earlier one (a cache that never hits
        breaks every later rule too; only the first is its mistake)."""
        if when and all(a.yours for a in answers):
            (self.kept if right else self.broken).append(kept if right else broken)


def check_connection_cache(cache_class: type | None = None, *, server: Any = None) -> Verdict:
    """The learner's connection cache, checked on the wire: a server running it (``server``, one
    started with ``lab.server(connection_cache=...)``, or one started here for ``cache_class``
    and closed after), the official SDK's ``responses.connect()``, and each create's trace.

        verdict = lab.exercises.check_connection_cache(server=mine)
        verdict        # Checked your connection cache: right on every rule (...).
    """
    if server is None:
        if cache_class is None:
            raise ValueError("check_connection_cache needs the class, or a server started with it")
        from labkit.client.launcher import LabkitServer

        with LabkitServer(connection_cache=cache_class) as own:
            return check_connection_cache(server=own)
    if getattr(server, "connection_cache", None) is None:  # a room's, or one running labkit's own
        raise ValueError(
            "check_connection_cache checks a server started with your class: "
            "lab.server(connection_cache=MyCache), or pass the class itself"
        )
    wire = Wire(server.base_url, server.api_key)
    with wire.client.responses.connect() as conn:  # follow-ups on one lane, stored
        follow = [wire.create(conn, store=True, input="Count to three.")]
        for _ in range(2):
            follow.append(wire.create(conn, store=True, previous_response_id=follow[-1].id))
    with wire.client.responses.connect() as conn:  # lanes, forks, failures (stored: a miss goes on)
        a1 = wire.create(conn, store=True, lane="a", input="Lane a.")
        fork = wire.create(conn, store=True, lane="b", previous_response_id=a1.id)
        a2 = wire.create(conn, store=True, lane="a", previous_response_id=a1.id)
        failed_fork = wire.create(conn, store=True, lane="c", previous_response_id=a2.id, input=BROKEN)
        a3 = wire.create(conn, store=True, lane="a", previous_response_id=a2.id)
        failed_own = wire.create(conn, store=True, lane="a", previous_response_id=a3.id, input=BROKEN)
        retry = wire.create(conn, store=True, lane="a", previous_response_id=a3.id)
        wire.create(conn, store=True, lane="a", input="Anything left?")  # carries a fault, if one is left
    with wire.client.responses.connect() as conn:  # store=false: memory is all there is
        u1 = wire.create(conn, store=False, input="Remember 7.")
        u2 = wire.create(conn, store=False, previous_response_id=u1.id)
        never = wire.create(conn, store=False, previous_response_id=f"resp_{uuid.uuid4().hex}")
        wire.create(conn, store=False, input="Anything left?")
    with wire.client.responses.connect() as one, wire.client.responses.connect() as two:
        x1 = wire.create(one, store=False, input="Mine alone.")
        other = wire.create(two, store=False, previous_response_id=x1.id)
        last_of_two = wire.create(two, store=False, input="Anything left?")
    wire.read_traces()

    rules = Rules()
    shared = other.response is not None or any(
        "never kept" in (a.hydration.get("cache_fault") or "") for a in (other, last_of_two)
    )
    rules.broken += [
        f"your {fault}" for fault in by_method(wire.faults()) if not (shared and "never kept" in fault)
    ]
    if shared:
        rules.broken.append(
            "a second connection named the first one's response and your cache handed it over: entries "
            "must stay with their connection (keep them on self, not on the class)"
        )
    missed = next((n for n, a in enumerate(follow[1:], start=2) if a.yours and not a.hit), None)
    read_more = next((a for a in follow[1:] if a.hit and a.classifier_items != a.new_items), None)
    hits = missed is None
    rules.judge(
        follow[1:],
        missed is None and read_more is None,
        "follow-ups were hits, the classifier reading only the new item",
        f"turn {missed} named the previous response but your cache missed: every follow-up re-read "
        "the whole history from the store",
    )
    rules.judge(
        [u2],
        u2.hit,
        "store=false was continued from memory",
        "a follow-up of a store=false response got previous_response_not_found: your cache missed it, "
        "and nothing else holds an unstored response",
    )
    rules.judge(
        [never],
        never.error == "previous_response_not_found",
        "an unknown id was a miss",
        "a create named a response this connection never had, and was answered from memory",
    )
    rules.judge(
        [fork],
        fork.hit,
        "a fork from another lane was a hit",
        "a create on lane b named lane a's latest response and your cache missed: serve must look at "
        "every lane's latest, not only the create's own",
        when=hits,
    )
    rules.judge(
        [fork, a2],
        a2.hit,
        "lanes kept apart",
        "lane a's follow-up missed after lane b kept a response: keep one latest entry per lane "
        "(lane b's replaced lane a's)",
        when=hits,
    )
    rules.judge(
        [failed_fork, a3],
        a3.hit,
        "a failed fork evicted nothing",
        "a fork that failed on lane c evicted lane a's latest response: failed evicts only the failing "
        "lane's own latest",
        when=a2.hit,
    )
    rules.judge(
        [failed_own, retry],
        retry.source == "store",
        "a failed continuation evicted its lane's latest",
        "after a continuation of lane a's latest failed, your cache still served it: failed must evict it, "
        "so that a retry comes from the store",
        when=a3.hit,
    )
    if not shared:
        rules.kept.append("connections kept apart")
    reference = getattr(server, "connection_cache", None) is ReferenceCache
    what = f"{WHAT} (this run: labkit's reference in its place)" if reference else WHAT
    return Verdict(what, kept=rules.kept, broken=rules.broken)


def by_method(faults: list[str]) -> list[str]:
    """The server's fault sentences, one per method (the first), each saying on how many of the
    check's connections it happened; without their closing period (a ``Verdict`` adds its own).

    >>> by_method(["C.keep raised X, on create 1.", "C.keep raised X, on create 3."])
    ["C.keep raised X, on create 1 (on 2 of the check's connections)"]
    """
    first: dict[str, str] = {}
    count: dict[str, int] = {}
    for fault in faults:
        method = fault.split(" ", 1)[0]
        first.setdefault(method, fault.rstrip("."))
        count[method] = count.get(method, 0) + 1
    return [
        text + (f" (on {count[m]} of the check's connections)" if count[m] > 1 else "")
        for m, text in first.items()
    ]


# ---------------------------------------------------------------- the race


def raced(
    frames: dict[str, Any],
    verdict: Verdict | None = None,
    baseline: str = "sprint",
    labkit: str = "websocket",
    yours: str = "your cache",
) -> str:
    """The race's sentence: what share of labkit's saving the learner's cache delivered, or,
    if their cache faulted on the way (labkit's then served their rollout), that this run
    measured labkit's cache and not theirs; and, given the check's ``verdict``, that speed is
    not correctness when a rule is broken.

        print(lab.exercises.cache.raced(frames, verdict))   # frames by label, from take_turns
    """
    from labkit.analysis.frames import span_detail
    from labkit.analysis.paired import saving

    faults = span_detail(frames[yours], "hydration", "cache_fault").dropna()
    if len(faults):
        fault = str(faults.iloc[0]).rstrip(".")
        return (
            f"Your cache faulted on turn {int(faults.index[0])} ({fault}): labkit's cache served your "
            "rollout from there, so this race measured labkit's, not yours. Fix it, then run the check again."
        )
    mine = saving(frames[baseline], frames[yours], column="wall")
    theirs = saving(frames[baseline], frames[labkit], column="wall")
    said = delivered(mine, theirs, baseline=f"the {baseline}" if baseline == "sprint" else baseline)
    if verdict is not None and not verdict.right:
        said += (
            " This race plays one lane and no failures, so it cannot see the rule the check found broken: "
            "a cache is not done until the check passes."
        )
    return said


def delivered(yours: Saving, labkit: Saving, baseline: str = "the sprint") -> str:
    """How much of labkit's saving the learner's cache delivered, in one sentence that holds
    whatever the runs measured (both savings against the same baseline, turn by turn).

    >>> from labkit.analysis.paired import Saving
    >>> print(delivered(Saving(30, 3, 200, 18), Saving(50, 3, 200, 18), baseline="X"))
    Your cache saved 30 ± 3 ms a turn against X, labkit's 50 ± 3 ms: it delivered 60% ± 7% of labkit's saving.
    >>> print(delivered(Saving(1, 4, 200, 18), Saving(50, 4, 200, 18)).split(": ", 1)[1])
    it delivered about none of labkit's saving (2% ± 8%).
    """
    head = f"Your cache saved {yours.ms_shown()} a turn against {baseline}, labkit's {labkit.ms_shown()}"
    if not labkit.sure:
        return f"{head}: labkit's own saving is within its noise on this run, so no share can be told."
    if yours.ms < -2 * yours.noise_ms:
        cost = with_noise(-yours.ms, yours.noise_ms, unit=" ms")
        return (
            f"Your cache cost {cost} a turn more than {baseline}, where labkit's saved {labkit.ms_shown()}: "
            "it delivered none of labkit's saving."
        )
    share = yours.ms / labkit.ms
    noise = abs(share) * math.hypot(yours.noise_ms / yours.ms if yours.ms else 0, labkit.noise_ms / labkit.ms)
    if yours.ms == 0:
        noise = yours.noise_ms / labkit.ms
    shown = percent(share, noise)
    if abs(share) <= 2 * noise:
        return f"{head}: it delivered about none of labkit's saving ({shown})."
    if abs(share - 1) <= 2 * noise:
        return f"{head}: it delivered labkit's saving, within the noise ({shown})."
    return f"{head}: it delivered {shown} of labkit's saving."
