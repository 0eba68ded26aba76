"""The render cache: rendered conversations kept, so that a turn tokenizes only what is new.

This module owns the render cache, and this docstring is its contract; the render and
retain stages, ``ResponseRun.left_behind`` and the WebSocket lanes point here.

**What is cached.** A rendering: a ``TokenBuffer`` (``labkit.engine.render``: a
conversation's token ids and the prefix-cache hashes of its full blocks) and the
``PrefixHasher`` (``labkit.engine.render``) that names the prefix it renders. Two places
keep renderings:

- the sprint's ``RenderCache``, one per server, shared by every connection and owner (API
  key): buffers stored under the digest of their owner, system block and items; the least
  recently used goes first, past a bound on the bytes its entries hold;
- the connection cache (``labkit.connection_cache``): each WebSocket lane's latest
  ``Conversation`` (``labkit.server.wscore.conversation``), whose buffer and hasher the response that
  continues it (on its lane, or forked onto another) goes on with.

**Who writes.** ``Renderings`` is the one way in: ``start`` (the render stage) only
reads, and ``keep`` (the retain stage) is the only writer of the ``RenderCache``. A
lane's conversation is replaced only by the response that finished on it
(``ResponseRun.left_behind``, stored by the lane in ``labkit.server.ws.websocket``). A turn takes
from either cache a fork of the buffer (a view that copies on write) and a copy of the
hasher, so whatever it appends, a cached rendering still shows what it showed; a turn refused
after its render (``labkit.server.stages.context_window``) takes back what it appended in place
(``TokenBuffer.discard``), so no cached rendering's list holds it.

**Threads.** Only the event loop touches a cached buffer or hasher, and the
``RenderCache`` refuses any other thread: views of one buffer share its ids, so a change
made beside the loop could reach every view. Work moved to a worker thread
(``labkit.server.stages.offload``) is given items, or a hasher the turn has just made for
itself, and returns token ids or digests; the loop appends them (``append_rendered``).

How the cache finds a prefix: a stateless request carries its whole history. Instead of
tokenizing it all again, the server hashes the conversation item by item (a chained hash
of what each item renders to, far cheaper than tokenizing) and looks for the longest
prefix it has rendered before; only the items after it are tokenized.

    >>> from labkit.engine.render import prefix_digests
    >>> cache = RenderCache()
    >>> items = [{"type": "message", "role": "user", "content": "hi"}]
    >>> buf = TokenBuffer.start("Be brief.", []); _ = buf.append(items)
    >>> cache.put(prefix_digests(buf.system_digest, items)[-1], buf)
    >>> hit, used = cache.longest_prefix(prefix_digests(buf.system_digest, items + items))
    >>> used, hit.ids == buf.ids
    (1, True)

Each owner's (API key's) renderings are its own: a hasher made for an owner seeds its hash
with the owner, and another owner's same conversation never finds it (nor learns it was rendered).

    >>> cache.longest_prefix(prefix_digests(buf.system_digest, items, owner="key_b"))
    (None, 0)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from cachetools import LRUCache

from labkit.api.items import Item
from labkit.api.stages import Source, Stage
from labkit.designs import Over
from labkit.engine.render import PrefixHasher, TokenBuffer, encode_items, system_digest
from labkit.server.stages.offload import off_loop_if_large, text_chars
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stores.traces import Span

# What an entry costs (measured with tracemalloc on CPython 3.11; a test checks both): a token id
# (or a block hash) is an int of its own (32 bytes) and its list slot (8, and about 1/8 more as a
# list grows); an entry's digest, its fork and the cache's bookkeeping come to about 420 bytes.
BYTES_PER_ID = 41
ENTRY_BYTES = 512
CAPACITY_BYTES = 4_000_000 * BYTES_PER_ID  # about four million tokens of renderings


def buffer_bytes(buffer: TokenBuffer) -> int:
    """What an entry holding ``buffer`` costs, counted as if its ids were its own (forks share them).

    >>> buffer_bytes(TokenBuffer("system digest", ids=[1, 2, 3]))
    635
    """
    return ENTRY_BYTES + BYTES_PER_ID * (len(buffer) + len(buffer.block_hashes))


class RenderCache:
    """An LRU of rendered buffers, each under the digest of the prefix it renders (``cachetools``),
    bounded by the bytes its entries hold (``buffer_bytes``). The event loop's thread only."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES) -> None:
        self._buffers: LRUCache[str, TokenBuffer] = LRUCache(capacity_bytes, getsizeof=buffer_bytes)
        self._thread = threading.get_ident()  # the thread that made it: the event loop's

    def __len__(self) -> int:
        return len(self._buffers)

    @property
    def bytes(self) -> int:
        """What the entries hold, by ``buffer_bytes``: at most ``capacity_bytes``."""
        return int(self._buffers.currsize)

    @property
    def capacity_bytes(self) -> int:
        return int(self._buffers.maxsize)

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise RuntimeError(
                "the render cache belongs to the event loop: see labkit.server.stages.render_cache"
            )

    def put(self, digest: str, buffer: TokenBuffer) -> None:
        """Keep a view of ``buffer`` (a fork: no copy; it shares the ids of a conversation that
        goes on growing, and still ends where it ends now). One larger than the whole cache is
        not kept."""
        self._check_thread()
        entry = buffer.fork()
        if buffer_bytes(entry) <= self.capacity_bytes:
            self._buffers[digest] = entry

    def longest_prefix(self, digests: Sequence[str]) -> tuple[TokenBuffer | None, int]:
        """The cached buffer for the longest known prefix, forked, and how many items it covers."""
        self._check_thread()
        for used in range(len(digests), 0, -1):
            found = self._buffers.get(digests[used - 1])  # a hit is now the most recently used
            if found is not None:
                return found.fork(), used
        return None, 0


# ---------------------------------------------------------------- the render and retain stages' way in


class Renderings:
    """Where a turn's rendering starts (the render stage) and what it leaves (the retain stage)."""

    def __init__(self, cache: RenderCache | None = None) -> None:
        self.cache = cache if cache is not None else RenderCache()

    async def start(self, turn: ResponseRun, span: Span) -> tuple[TokenBuffer, list[Item]]:
        """The buffer a turn renders onto and the items still to render; ``span`` notes where
        the buffer came from (its ``cache`` detail).

        Under a design that renders only what is new: the lane's conversation when it has
        the same instructions and tools (``connection_cache``), else the render cache's longest
        prefix (``render_cache``, or ``miss``). Otherwise the system block alone (``none``).
        """
        req = turn.req
        assert req is not None
        system = system_digest(req.instructions, req.tools)
        reuse = turn.plan[Stage.RENDER].over is Over.NEW
        cached = turn.parent
        if reuse and cached is not None and cached.buffer.system_digest == system:
            span.detail["cache"] = Source.CONNECTION_CACHE
            turn.hasher = cached.hasher.copy() if cached.hasher else None
            return cached.buffer.fork(), turn.new_items  # a view: the history's ids are not copied
        if reuse and turn.design.render_cache:
            turn.hasher = PrefixHasher(system, turn.owner)  # the turn's own until it is kept
            items = turn.items
            digests = await off_loop_if_large(text_chars(items), span, turn.hasher.extend, items)
            found, used = self.cache.longest_prefix(digests)
            span.detail["cache"] = Source.RENDER_CACHE if found else Source.MISS
            return found or TokenBuffer.start(req.instructions, req.tools), items[used:]
        span.detail["cache"] = Source.NONE
        return TokenBuffer.start(req.instructions, req.tools), turn.items

    def keep(self, turn: ResponseRun) -> int:
        """A finished turn's buffer into the render cache, under the digest of everything it
        renders (when its design has one); returns how many items were hashed for that digest:
        only those the turn's hasher had not read."""
        buffer = turn.buffer
        if not turn.design.render_cache or buffer is None:
            return 0
        hasher = turn.hasher or PrefixHasher(buffer.system_digest, turn.owner)
        hashed = len(hasher.extend(turn.items_from(hasher.count)))
        turn.hasher = hasher
        if hasher.last is not None:
            self.cache.put(hasher.last, buffer)
        return hashed


async def append_rendered(buffer: TokenBuffer, items: Sequence[Item], span: Span) -> None:
    """Render and append ``items``: the tokenizing off the loop when they are large, the
    appending always on it (see the threads rule above)."""
    blocks = await off_loop_if_large(text_chars(items), span, encode_items, items)
    buffer.append_blocks(blocks)
