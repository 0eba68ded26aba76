"""The connection cache: the responses one WebSocket connection keeps in memory, and the one
answer a create gets from it.

It does no I/O and imports nothing of labkit's, so it sits on the bottom floor: the server's
WebSocket core asks it (``labkit.server.wscore.connection``), and notebook 03's exercise, which
asks a learner to write it, runs it as labkit's reference (``labkit.analysis.exercises.cache``).

Each lane (``stream_id``, or the default lane) keeps its most recent finished response as a
``Conversation`` (``labkit.server.wscore.conversation``): the Response, the whole conversation's items, the
rendered tokens, the model and the replica. So a connection holds at most one response per
lane: 33 with every named lane in use (``limits.MAX_LANES`` and the default lane). A newer
response that finishes on a lane replaces that lane's; nothing else is ever added. Each one's
rendering fits its model's context window (``labkit.server.stages.context_window``: a follow-up past it
is refused, or truncated), so what a connection holds is bounded by 33 windows of tokens.

A create's ``previous_response_id`` may name any response the cache holds, on any lane: a
create on lane ``b`` naming lane ``a``'s latest response forks the conversation onto ``b``,
served from memory like a follow-up on ``a`` itself (only the new items are checked and
rendered). ``serve`` is the one place that question is asked; the answer travels on the turn
(``ResponseRun.parent``) and every stage reads it there.

A failure drops what it continued only on its own lane: a create that fails while continuing
its lane's latest response evicts it (a retry must come from the store), while a fork that
fails on another lane leaves the response it named in place, for its own lane to go on with.

    >>> cache = ConnectionCache(ids=lambda entry: entry)  # here an entry is its own id
    >>> cache.keep("a", "resp_1"); cache.serve("resp_1"), cache.serve("resp_2")
    ('resp_1', None)
    >>> cache.failed("b", "resp_1"); cache.serve("resp_1")  # a fork failed on another lane: kept
    'resp_1'
    >>> cache.failed("a", "resp_1"); cache.serve("resp_1") is None  # a continuation failed: evicted
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

Lane = str | None  # a lane's stream_id; None is the default lane
Entry = TypeVar("Entry")


def response_id(conversation: object) -> str:
    """The id of the response a ``Conversation`` ends with."""
    return str(conversation.response["id"])  # type: ignore[attr-defined]


class ConnectionCache(Generic[Entry]):
    """One connection's cached responses: each lane's latest, found by response id from any lane.

    ``enabled`` is False for a design without the connection cache (``naive``, ``sprint``): it
    then keeps nothing and every answer is "not here", so follow-ups go to the store.
    """

    def __init__(self, enabled: bool = True, ids: Callable[[Entry], object] = response_id) -> None:
        self.enabled = enabled
        self._id = ids
        self._latest: dict[Lane, Entry] = {}

    def __len__(self) -> int:
        return len(self._latest)

    def serve(self, previous_response_id: object) -> Entry | None:
        """The cached conversation a create continues, or None: asked once per create, when it
        starts (not when it arrives: a response still running on its lane may be the one)."""
        if not self.enabled or not isinstance(previous_response_id, str):
            return None
        for entry in self._latest.values():
            if self._id(entry) == previous_response_id:
                return entry
        return None

    def keep(self, lane: Lane, conversation: Entry) -> None:
        """A response finished on ``lane``: it replaces the lane's latest."""
        if self.enabled:
            self._latest[lane] = conversation

    def failed(self, lane: Lane, previous_response_id: object) -> None:
        """A create on ``lane`` failed: evict what it continued, if that is ``lane``'s own latest."""
        entry = self._latest.get(lane)
        if entry is not None and self._id(entry) == previous_response_id:
            del self._latest[lane]


class Cache(Protocol[Entry]):
    """The three questions a connection asks its cache: ``ConnectionCache`` answers them, and so does
    a learner's class behind its guard (``labkit.server.ws.learner_cache``), which the I/O layer builds."""

    def serve(self, previous_response_id: object) -> Entry | None: ...

    def keep(self, lane: Lane, conversation: Entry) -> None: ...

    def failed(self, lane: Lane, previous_response_id: object) -> None: ...
