"""API keys. On loopback any bearer key is accepted by default; a key list makes keys required.

Stored responses belong to the key that created them: the owner is a digest
of the key, so another key (or no key) cannot read, chain from or delete them.

    >>> Keys().owner("Bearer sk-a") == Keys().owner("Bearer sk-a") != Keys().owner("Bearer sk-b")
    True
    >>> Keys(["sk-a"]).owner("Bearer sk-\\u00e9")
    Traceback (most recent call last):
    labkit.api.errors.APIError: Incorrect API key provided: a key is printable ASCII.

``KeyLimiter`` caps what one key holds open at once (WebSocket connections, requests in
flight, the bytes of frames its connections hold unused), so one learner's runaway loop cannot
take every slot, or the memory, of a shared server.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from labkit.api.errors import APIError, authentication_error, rate_limited
from labkit.api.owners import owner_of_key
from labkit.server.wscore.held_bytes import HeldBytes

KEYS_ENV = "LABKIT_API_KEYS"
ANONYMOUS = "anonymous"


def keys_from_env() -> list[str]:
    """``LABKIT_API_KEYS=key1,key2``: the keys a server requires, if any."""
    return [k.strip() for k in os.environ.get(KEYS_ENV, "").split(",") if k.strip()]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class Keys:
    def __init__(self, required: list[str] | None = None) -> None:
        self.required = list(required or [])
        # Compared as digests: equal lengths, so compare_digest's time says nothing about the key.
        self._digests = [_digest(k) for k in self.required]

    def owner(self, authorization: str | None) -> str:
        """The owner id for an ``Authorization`` header; raises a 401 ``APIError`` if refused."""
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip() if scheme.lower() == "bearer" else ""
        if key and not (key.isascii() and key.isprintable()):
            # Header bytes arrive as latin-1 text; a real key is printable ASCII, so this is a typo
            # (or a paste with a stray character), refused on an open server as on a keyed one.
            raise authentication_error("Incorrect API key provided: a key is printable ASCII.")
        if self.required:
            if not key:
                raise authentication_error(
                    "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
                )
            sent = _digest(key)
            matched = False
            for digest in self._digests:  # every key is compared: no early exit to time
                matched |= hmac.compare_digest(sent, digest)
            if not matched:
                raise authentication_error("Incorrect API key provided.")
        if not key:
            return ANONYMOUS
        return owner_of_key(key)


# The API's rate-limit headers for a cap on requests: its size, and what remains of it.
RATE_LIMIT_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests")


class KeyLimiter:
    """Per-key caps on open WebSocket connections and on requests in flight; ``None`` is no cap.

    Requests without a key share the anonymous owner, and so share its caps.

        >>> limits = KeyLimiter(max_connections=None, max_requests=1)
        >>> with limits.request("key_a"), limits.request("key_a"):
        ...     pass
        Traceback (most recent call last):
        labkit.api.errors.APIError: Too many requests in flight for this API key (at most 1 at once).
    """

    def __init__(self, max_connections: int | None = None, max_requests: int | None = None) -> None:
        self.max_connections = max_connections
        self.max_requests = max_requests
        self.connections: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.held: dict[str, HeldBytes] = {}  # by key, while one of its WebSocket connections is open
        self._holders: Counter[str] = Counter()

    @contextmanager
    def connection(self, owner: str) -> Iterator[None]:
        with self._hold(self.connections, owner, self.max_connections, "open WebSocket connections"):
            yield

    @contextmanager
    def request(self, owner: str) -> Iterator[None]:
        """A request in flight; refused past the cap with the API's rate-limit headers (the cap,
        and none remaining), over HTTP as headers and over WebSocket in the error event."""
        with self._hold(self.requests, owner, self.max_requests, "requests in flight", RATE_LIMIT_HEADERS):
            yield

    @contextmanager
    def holding(self, owner: str, limit: int | None) -> Iterator[HeldBytes]:
        """What ``owner``'s WebSocket connections hold of their clients' frames, together, within
        ``limit`` bytes: one ``HeldBytes`` for the key, shared while any of them is open.

            >>> limits = KeyLimiter()
            >>> with limits.holding("key_a", 100) as one, limits.holding("key_a", 100) as two:
            ...     one.take(60), two.take(60)
            (True, False)
        """
        held = self.held.get(owner)
        if held is None:
            held = self.held[owner] = HeldBytes(limit, "this API key")
        self._holders[owner] += 1
        try:
            yield held
        finally:
            self._holders[owner] -= 1
            if self._holders[owner] <= 0:
                del self._holders[owner], self.held[owner]

    @staticmethod
    @contextmanager
    def _hold(
        counts: Counter[str], owner: str, cap: int | None, what: str, headers: tuple[str, str] | None = None
    ) -> Iterator[None]:
        if cap is not None and counts[owner] >= cap:
            limit = {headers[0]: str(cap), headers[1]: "0"} if headers else None
            raise rate_limited(f"Too many {what} for this API key (at most {cap} at once).", headers=limit)
        counts[owner] += 1
        try:
            yield
        finally:
            counts[owner] -= 1
            if counts[owner] <= 0:
                del counts[owner]  # the counter holds only keys with something open


# HTTP paths a client keeps open like a WebSocket (a live subscription): counted as connections.
SUBSCRIPTIONS = frozenset({"/v1/labkit/traces/stream"})


class RequestsPerKey:
    """ASGI middleware: every HTTP request but ``/healthz`` counts against its key's cap of
    requests in flight (``KeyLimiter.max_requests``), from its first byte to the last byte
    of its answer (an SSE stream included); a subscription (``SUBSCRIPTIONS``) counts
    against the cap of open connections instead. Past a cap the answer is a 429
    ``rate_limit_error``. A request whose key is refused passes on, to be answered 401."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        limiter: KeyLimiter = state.key_limiter
        subscription = scope["path"] in SUBSCRIPTIONS
        cap = limiter.max_connections if subscription else limiter.max_requests
        if cap is None:
            await self.app(scope, receive, send)
            return
        try:
            owner = state.pipeline.keys.owner(Headers(scope=scope).get("authorization"))
        except APIError:
            await self.app(scope, receive, send)
            return
        with ExitStack() as held:
            try:
                held.enter_context(limiter.connection(owner) if subscription else limiter.request(owner))
            except APIError as err:
                await JSONResponse(err.body(), status_code=err.status, headers=err.headers)(
                    scope, receive, send
                )
                return
            await self.app(scope, receive, send)
