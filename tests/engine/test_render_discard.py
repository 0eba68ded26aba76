"""A view of a rendered conversation that is dropped unused gives back what it appended.

A request refused after its render (past its model's context window) appended its items in
place to the token list a cached conversation's view shares (``TokenBuffer``'s copy-on-write);
``discard`` takes them off again, so the cached conversation holds only what it shows.
"""

from __future__ import annotations

from labkit.engine.render import TokenBuffer

HI = [{"type": "message", "role": "user", "content": "hi"}]


def test_a_discarded_view_gives_back_what_it_appended_to_a_shared_list() -> None:
    """A refused request's rendering, appended in place to a cached conversation's ids, goes
    with the request: the cached view's list ends where the view does, and the next fork of it
    appends in place again (no copy)."""
    cached = TokenBuffer.start("Be brief.", [])
    refused = cached.fork()
    refused.append(HI * 50)
    assert len(cached._ids) > len(cached)  # the refused view grew the shared list in place
    refused.discard()
    assert len(cached._ids) == len(cached) and len(refused) == 0
    served = cached.fork()
    served.append(HI)
    assert served.copied == 0 and list(served.ids)[: len(cached)] == list(cached.ids)


def test_a_discarded_copy_leaves_the_shared_list_alone() -> None:
    cached = TokenBuffer.start("Be brief.", [])
    first, second = cached.fork(), cached.fork()
    first.append(HI)  # in place
    second.append(HI * 2)  # copies: the list is first's now
    second.discard()
    assert len(cached._ids) == len(first) and first.ids == list(first.ids)
