"""The chat template: instructions, tools and conversation items into token ids.

Every block is ``<|im_start|>{header}<|im_sep|>{body}<|im_end|>``. Because
special tokens separate every header and body, each piece of text is
tokenized independently of its neighbours, so a conversation can be rendered once and
then *appended to* item by item, giving exactly the ids a full re-render gives.
That is what lets a connection-scoped cache skip re-tokenizing history.

    >>> buf = TokenBuffer.start("Be brief.", tools=[])
    >>> n = buf.append([{"type": "message", "role": "user", "content": "hi"}])
    >>> buf.ids == encode_rendered(render_conversation("Be brief.", [], [
    ...     {"type": "message", "role": "user", "content": "hi"}]))
    True
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from labkit.api.compaction import summary_text
from labkit.api.items import Item
from labkit.engine.tool_namespace import tool_namespace
from labkit.text.tokenizer import (
    IM_END,
    IM_SEP,
    IM_START,
    SPECIAL_TOKENS,
    encode_text,
    encoding,
    special,
)

# ---------------------------------------------------------------- item -> (header, body)


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts joined.

    >>> content_text([{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}])
    'ab'
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            parts.append(text if isinstance(text, str) else json.dumps(part, sort_keys=True))
        else:
            parts.append(str(part))
    return "".join(parts)


def item_block(item: Item) -> tuple[str, str]:
    """The header and body an item renders to.

    >>> item_block({"type": "function_call_output", "call_id": "call_1", "output": "ok"})
    ('tool call_id=call_1', 'ok')
    """
    kind = item.get("type", "message")
    if kind == "message":
        return str(item.get("role", "user")), content_text(item.get("content"))
    if kind == "function_call":
        header = f"assistant to=functions.{item.get('name')} call_id={item.get('call_id')}"
        return header, str(item.get("arguments", ""))
    if kind == "function_call_output":
        return f"tool call_id={item.get('call_id')}", content_text(item.get("output"))
    if kind == "reasoning":
        summary = item.get("summary") or []
        return "assistant reasoning", content_text(summary)
    if kind == "compaction":
        # The summary it carries, not its sealed text: the replaced window in far fewer tokens,
        # and the same tokens every time, so the prefix cache still holds what follows.
        return "compaction", summary_text(item)
    body = {k: v for k, v in item.items() if k not in ("id", "status")}
    return str(kind), json.dumps(body, sort_keys=True)


# ---------------------------------------------------------------- the system block


def system_block(instructions: str | None, tools: Sequence[Item]) -> tuple[str, str]:
    body = instructions or ""
    if tools:
        body += "\n\n# Tools\n\n" + tool_namespace(tools)
    return "system", body


def system_digest(instructions: str | None, tools: Sequence[Item]) -> str:
    """A digest of what the system block depends on: equal digests, equal system blocks."""
    raw = json.dumps([instructions or "", list(tools)])  # a tool's field order matters: it is rendered
    return hashlib.sha256(raw.encode()).hexdigest()


# ---------------------------------------------------------------- naming a rendered prefix


class PrefixHasher:
    """A running hash over the system block and then item after item.

    Its digest ``i`` names the system block and items ``0..i`` (and, given one, their owner):
    equal digests, equal tokens. It can be copied and extended, so a conversation that
    grows is hashed only where it grew.
    """

    def __init__(self, system_digest: str, owner: str | None = None) -> None:
        self._running = hashlib.sha256(system_digest.encode())
        if owner is not None:  # owners never share a digest (labkit.server.stages.render_cache)
            self._running.update(b"\x02" + owner.encode())
        self.count = 0  # items hashed so far
        self.last: str | None = None  # the digest after the last item

    def extend(self, items: Sequence[Item]) -> list[str]:
        """The digest after each of ``items``."""
        digests = []
        for item in items:
            block_header, body = item_block(item)
            self._running.update(b"\x00" + block_header.encode() + b"\x01" + body.encode())
            digests.append(self._running.copy().hexdigest())
        self.count += len(digests)
        self.last = digests[-1] if digests else self.last
        return digests

    def copy(self) -> PrefixHasher:
        twin = PrefixHasher.__new__(PrefixHasher)
        twin._running, twin.count, twin.last = self._running.copy(), self.count, self.last
        return twin


def prefix_digests(system_digest: str, items: Sequence[Item], owner: str | None = None) -> list[str]:
    """The digest of every prefix of ``items`` (see ``PrefixHasher``)."""
    return PrefixHasher(system_digest, owner).extend(items)


# ---------------------------------------------------------------- two ways to tokenize


def render_conversation(instructions: str | None, tools: Sequence[Item], items: Iterable[Item]) -> str:
    """The whole conversation as one string with special-token markup (the oracle's input)."""
    blocks = [system_block(instructions, tools), *(item_block(i) for i in items)]
    return "".join(f"{IM_START}{header}{IM_SEP}{body}{IM_END}" for header, body in blocks)


def encode_rendered(text: str) -> list[int]:
    """Tokenize a full rendering at once, markup recognised as special tokens."""
    return encoding().encode(text, allowed_special=set(SPECIAL_TOKENS))


def encode_block(header: str, body: str | list[int]) -> list[int]:
    """One block's ids; header and body are ordinary text (or the body's ids, already sampled)."""
    body_ids = encode_text(body) if isinstance(body, str) else body
    return [special(IM_START), *encode_text(header), special(IM_SEP), *body_ids, special(IM_END)]


GENERATION_PROMPT = [special(IM_START), *encode_text("assistant")]


def encode_items(items: Iterable[Item]) -> list[list[int]]:
    """Each item's block of ids. Pure (no buffer is touched), so it may run in a worker thread."""
    return [encode_block(*item_block(item)) for item in items]


class TokenView(Sequence[int]):
    """The first ``length`` items of a list that only ever grows: read-only, never copied.

    Reading it costs what is read: ``len`` is O(1), a slice copies only the slice.

    >>> grows = [1, 2, 3]
    >>> view = TokenView(grows, 2)
    >>> grows.append(4)
    >>> view == [1, 2], view[-1], view[1:], len(view)
    (True, 2, [2], 2)
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[int], length: int) -> None:
        self._items = items
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self._items[slice(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("TokenView index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenView):
            other = other._items[: other._length]
        if not isinstance(other, list | tuple):
            return NotImplemented
        return self._items[: self._length] == list(other)

    def __add__(self, other: Sequence[int]) -> list[int]:
        """A new list, as ``list + list`` gives."""
        return [*self._items[: self._length], *other]

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return f"TokenView({self._items[: self._length]!r})"


class TokenBuffer:
    """A rendered conversation kept as token ids, which grows by appending items.

    ``encoded`` counts the tokens this buffer's owner had the tokenizer produce:
    the work a cached buffer saves is the work it never adds here.

    Forks share memory. A buffer is a view of the first ``len(buffer)`` ids of a
    list that only ever grows; ``fork`` makes another view of the same list, so a
    connection's cached conversation and the render cache's entry for it cost no
    copy, and the fork that appends first extends the list in place (the other
    views still end where they did). A view that appends after another view has
    grown the list past its end copies its own ids first (copy-on-write): only
    that case costs a copy, and ``copied`` counts it. The prefix-cache hashes of the
    buffer's full blocks (``block_hashes``) are kept the same way. A view dropped
    unused (a refused request's) gives back what it appended in place (``discard``).

        >>> base = TokenBuffer.start("Be brief.", [])
        >>> a, b = base.fork(), base.fork()
        >>> _ = a.append([{"type": "message", "role": "user", "content": "hi"}])  # in place
        >>> _ = b.append([{"type": "message", "role": "user", "content": "yo"}])  # copies
        >>> len(base) < len(a) == len(b), a.copied, b.copied == len(base)
        (True, 0, True)
    """

    def __init__(
        self,
        system_digest: str,
        ids: list[int] | None = None,
        items: int = 0,
        encoded: int = 0,
        block_hashes: list[int] | None = None,
    ) -> None:
        self.system_digest = system_digest  # names the instructions and tools it was rendered with
        self._ids = ids if ids is not None else []
        self._length = len(self._ids)
        self._grown_from = self._length  # where this view began appending to the list it holds
        # Prefix-cache hashes of the blocks of ``ids`` (reused too: a follow-up hashes only new blocks).
        self._hashes = block_hashes if block_hashes is not None else []
        self._hash_count = len(self._hashes)
        self.items = items
        self.encoded = encoded
        self.copied = 0  # ids and block hashes this view copied to grow (copy-on-write), since it was made

    @classmethod
    def start(cls, instructions: str | None, tools: Sequence[Item]) -> TokenBuffer:
        ids = encode_block(*system_block(instructions, tools))
        return cls(system_digest(instructions, tools), ids=ids, encoded=len(ids))

    def __len__(self) -> int:
        """Token count (O(1))."""
        return self._length

    def __bool__(self) -> bool:
        return True  # a buffer is something, even before it holds a token (``found or ...``)

    @property
    def ids(self) -> TokenView:
        """The rendered ids: a read-only view, not a copy (``list(buffer.ids)`` makes one)."""
        return TokenView(self._ids, self._length)

    @property
    def block_hashes(self) -> TokenView:
        """Prefix-cache hashes of the buffer's first full blocks (those retained so far)."""
        return TokenView(self._hashes, self._hash_count)

    def _growable(self) -> list[int]:
        if len(self._ids) != self._length:  # another view grew the list past this one's end
            self._ids = self._ids[: self._length]
            self.copied += self._length
            self._grown_from = self._length
        return self._ids

    def append_blocks(self, blocks: Iterable[list[int]], *, encoded: bool = True) -> int:
        """Append already-encoded item blocks (see ``encode_items``); returns their tokens.

        ``encoded``: whether the tokenizer produced them for this buffer (counted in ``encoded``).
        """
        ids, added = self._growable(), 0
        for block in blocks:
            ids.extend(block)
            self.items += 1
            added += len(block)
        self._length = len(ids)
        if encoded:
            self.encoded += added
        return added

    def append(self, items: Iterable[Item]) -> int:
        """Render and append items; returns how many tokens were encoded."""
        return self.append_blocks(encode_items(items))

    def append_sampled(self, item: Item, body_ids: list[int]) -> int:
        """Append an output item from the ids the model sampled: only markup and header are new work."""
        block = encode_block(item_block(item)[0], body_ids)
        self.append_blocks([block], encoded=False)
        added = len(block) - len(body_ids)
        self.encoded += added
        return added

    def add_block_hashes(self, hashes: Sequence[int]) -> None:
        """Keep the hashes of the blocks after ``block_hashes`` (as ``PrefixCache.insert`` returns them)."""
        if not hashes:
            return
        if len(self._hashes) != self._hash_count:  # another view added hashes past this one's end
            self._hashes = self._hashes[: self._hash_count]
            self.copied += self._hash_count
        self._hashes.extend(hashes)
        self._hash_count = len(self._hashes)

    def fork(self) -> TokenBuffer:
        """Another view of the same ids to extend, with its work counters at zero (the shared
        tokens cost nothing, and nothing is copied until a copy is needed)."""
        twin = TokenBuffer.__new__(TokenBuffer)
        twin.system_digest, twin.items, twin.encoded, twin.copied = self.system_digest, self.items, 0, 0
        twin._ids, twin._length, twin._grown_from = self._ids, self._length, self._length
        twin._hashes, twin._hash_count = self._hashes, self._hash_count
        return twin

    def discard(self) -> None:
        """Done with this view, unkept and unforked (a request refused after its render): take off
        the list the ids it appended in place, which the views it shares the list with end
        before, so a cached conversation does not hold them. The view is then empty.

            >>> base = TokenBuffer.start("Be brief.", [])
            >>> turn = base.fork(); _ = turn.append([{"type": "message", "role": "user", "content": "hi"}])
            >>> turn.discard(); len(base._ids) == len(base), len(turn)
            (True, 0)
        """
        if len(self._ids) == self._length:  # else another view grew the list past this one: keep it
            del self._ids[self._grown_from :]
        self._ids, self._length, self._grown_from, self.items = [], 0, 0, 0

    def prompt(self) -> list[int]:
        """The ids the model is run on, as a new list: the conversation plus the assistant's turn
        opener. The engine takes ``ids`` and ``GENERATION_PROMPT`` apart instead, copying neither."""
        return [*self.ids, *GENERATION_PROMPT]
