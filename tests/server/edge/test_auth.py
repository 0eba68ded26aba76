"""API keys and the per-key caps (``labkit.server.edge.auth``).

In process: the owner a key stands for, the refusals (401) of a missing, wrong or garbled key,
the keys read from ``$LABKIT_API_KEYS``, and what a ``KeyLimiter`` holds and refuses (429).
Over loopback, with raw httpx: a real ``labkit serve`` with two keys and caps of one, and the
real app with no keys served in this process, for the middleware that counts every HTTP
request (or trace subscription) against its key from its first byte to its last.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from labkit.api.errors import APIError
from labkit.client.launcher import LabkitServer
from labkit.limits import ServerLimits
from labkit.server.app import ServerConfig, create_app
from labkit.server.edge.auth import ANONYMOUS, KEYS_ENV, KeyLimiter, Keys, keys_from_env
from tests.helpers import KEY_A, KEY_B, assert_api_error, bearer, served_in_thread

# ---------------------------------------------------------------- keys and owners


def refusal(keys: Keys, authorization: str | None) -> APIError:
    """The error ``keys`` answers ``authorization`` with (it must refuse it)."""
    with pytest.raises(APIError) as refused:
        keys.owner(authorization)
    return refused.value


def test_an_open_server_accepts_any_bearer_key_and_owns_by_it() -> None:
    keys = Keys()
    owner = keys.owner("Bearer sk-a")
    assert owner == keys.owner("bearer   sk-a ")  # the scheme in any case, the key stripped
    assert owner == Keys(["sk-a"]).owner("Bearer sk-a")  # the same owner on a keyed server
    assert owner != keys.owner("Bearer sk-b")
    assert re.fullmatch(r"key_[0-9a-f]{32}", owner) and "sk-a" not in owner  # a digest, not the key


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer   ", "Basic c2stYQ==", "sk-a"])
def test_without_a_bearer_key_an_open_server_serves_the_anonymous_owner(authorization: str | None) -> None:
    assert Keys().owner(authorization) == ANONYMOUS


def test_a_keyed_server_refuses_a_missing_or_wrong_key() -> None:
    keys = Keys(["sk-a", "sk-b"])
    for missing in (None, "", "Bearer ", "Basic sk-a", "sk-a"):
        err = refusal(keys, missing)
        assert (err.status, err.type) == (401, "authentication_error")
        assert err.message.startswith("You didn't provide an API key."), missing
    for wrong in ("Bearer sk-c", "Bearer sk-a2", "Bearer SK-A", "Bearer sk-"):
        err = refusal(keys, wrong)
        assert (err.status, err.type, err.message) == (
            401,
            "authentication_error",
            "Incorrect API key provided.",
        )
    assert keys.owner("Bearer sk-a") not in (ANONYMOUS, keys.owner("Bearer sk-b"))


@pytest.mark.parametrize("required", [[], ["sk-a"]], ids=["open", "keyed"])
def test_a_key_that_is_not_printable_ascii_is_refused_open_or_keyed(required: list[str]) -> None:
    for garbled in ("Bearer sk-\u00e9", "Bearer sk\ta", "Bearer sk-a\x7f"):
        err = refusal(Keys(required), garbled)
        assert (err.status, err.type) == (401, "authentication_error")
        assert err.message == "Incorrect API key provided: a key is printable ASCII."


def test_keys_compare_every_key_and_refuse_non_ascii() -> None:
    keys = Keys(["sk-a", "sk-b"])
    assert keys.owner("Bearer sk-b") == Keys().owner("Bearer sk-b")
    for header in ("Bearer sk-\u00e9", "Bearer sk-a\x00", "Bearer \udcff"):
        with pytest.raises(Exception) as refused:
            keys.owner(header)
        assert getattr(refused.value, "status", None) == 401


def test_every_key_is_compared_as_a_digest_of_one_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism behind a check whose time says nothing of the keys: each required key is
    compared (no early exit on a match), and always as two SHA-256 digests (never the keys,
    whose lengths differ)."""
    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    keys = Keys(["sk-first", "sk-second-and-much-longer", "sk-3"])
    keys.owner("Bearer sk-first")  # the first key matches; the other two are compared all the same
    assert compared == [(32, 32)] * 3
    compared.clear()
    refusal(keys, "Bearer sk-not-one-of-them-at-all")
    assert compared == [(32, 32)] * 3


def test_keys_from_the_environment_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYS_ENV, " sk-a, ,sk-b ,,")
    assert keys_from_env() == ["sk-a", "sk-b"]
    monkeypatch.setenv(KEYS_ENV, " , ")
    assert keys_from_env() == []
    monkeypatch.delenv(KEYS_ENV)
    assert keys_from_env() == []


# ---------------------------------------------------------------- KeyLimiter, in process


def test_key_limiter_releases_and_forgets() -> None:
    limits = KeyLimiter(max_connections=2, max_requests=None)
    with limits.connection("a"), limits.connection("a"):
        with pytest.raises(Exception) as refused, limits.connection("a"):
            pass
        assert getattr(refused.value, "status", None) == 429
        with limits.connection("b"):
            pass
    assert not limits.connections  # nothing is kept for keys with nothing open
    with limits.request("a"), limits.request("a"):  # no cap on requests
        pass


def test_a_keys_connections_and_requests_are_capped_apart() -> None:
    limits = KeyLimiter(max_connections=1, max_requests=2)
    with limits.connection("a"), limits.request("a"), limits.request("a"):
        with pytest.raises(APIError) as refused, limits.request("a"):
            pass
        assert (refused.value.status, refused.value.type) == (429, "rate_limit_error")
        assert refused.value.message == "Too many requests in flight for this API key (at most 2 at once)."
        with pytest.raises(APIError) as refused, limits.connection("a"):
            pass
        assert refused.value.message == (
            "Too many open WebSocket connections for this API key (at most 1 at once)."
        )
        with limits.connection("b"), limits.request("b"), limits.request("b"):  # another key's own slots
            pass
        assert (limits.connections, limits.requests) == ({"a": 1}, {"a": 2})  # refusals hold nothing


def test_a_slot_is_released_when_its_holder_fails() -> None:
    limits = KeyLimiter(max_connections=None, max_requests=1)
    with pytest.raises(RuntimeError), limits.request("a"):
        raise RuntimeError("the handler crashed")
    assert not limits.requests
    with limits.request("a"):  # the one slot is free again
        pass


# ---------------------------------------------------------------- per-key caps over HTTP


def test_requests_in_flight_per_key_are_capped(one_at_a_time: LabkitServer) -> None:
    base = one_at_a_time.base_url
    slow = {"model": "labkit-classic", "input": "Write 60 tokens.", "stream": True, "store": False}
    with httpx.stream("POST", f"{base}/responses", json=slow, headers=bearer(KEY_A), timeout=30) as reply:
        lines = reply.iter_lines()
        assert next(lines) == "event: response.created"  # the stream is open: one request in flight
        refused = httpx.get(f"{base}/models", headers=bearer(KEY_A), timeout=30)
        error = assert_api_error(refused, 429)
        assert error["type"] == "rate_limit_error"
        assert httpx.get(f"{base}/models", headers=bearer(KEY_B), timeout=30).status_code == 200
        assert httpx.get(f"{base.removesuffix('/v1')}/healthz", timeout=30).status_code == 200
        for _ in lines:
            pass  # read to the end: the request is over
    for _ in range(100):  # the server lets go once it has sent the last byte
        if httpx.get(f"{base}/models", headers=bearer(KEY_A), timeout=30).status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the key's request slot was never released")


def test_a_trace_subscription_counts_as_a_connection_not_a_request(one_at_a_time: LabkitServer) -> None:
    base = one_at_a_time.base_url
    url = f"{base}/labkit/traces/stream"
    with httpx.stream("GET", url, headers=bearer(KEY_B), timeout=30) as watching:
        assert watching.status_code == 200
        # The subscription stays open, yet the key's requests are served ...
        assert httpx.get(f"{base}/models", headers=bearer(KEY_B), timeout=30).status_code == 200
        # ... and a second subscription is over the key's connections.
        with httpx.stream("GET", url, headers=bearer(KEY_B), timeout=30) as second:
            assert second.status_code == 429


def test_a_trace_subscription_and_a_websocket_share_the_keys_connections(one_at_a_time: LabkitServer) -> None:
    url = f"{one_at_a_time.base_url}/labkit/traces/stream"
    with httpx.stream("GET", url, headers=bearer(KEY_A), timeout=30) as watching:
        assert watching.status_code == 200
        with (
            pytest.raises(InvalidStatus) as refused,
            connect(one_at_a_time.ws_url, additional_headers=bearer(KEY_A)),
        ):
            pass
        assert refused.value.response.status_code == 429


def test_a_refused_key_passes_the_caps_to_be_answered_401(one_at_a_time: LabkitServer) -> None:
    for headers in ({}, bearer("sk-wrong")):
        error = assert_api_error(
            httpx.get(f"{one_at_a_time.base_url}/models", headers=headers, timeout=30), 401
        )
        assert error["type"] == "authentication_error"


@pytest.fixture
def open_one_at_a_time(tmp_path: Path) -> Iterator[str]:
    """The real app with no keys and one request in flight per key, served in this process on
    loopback; its base URL."""
    limits = ServerLimits(max_requests_per_key=1)
    app = create_app(ServerConfig(db=str(tmp_path / "labkit.db"), profile="local", limits=limits))
    with served_in_thread(app) as url:
        yield f"{url}v1"


def test_requests_without_a_key_share_the_anonymous_owners_cap(open_one_at_a_time: str) -> None:
    base = open_one_at_a_time
    slow = {"model": "labkit-classic", "input": "Write 60 tokens.", "stream": True, "store": False}
    with httpx.stream("POST", f"{base}/responses", json=slow, timeout=30) as reply:
        lines = reply.iter_lines()  # kept: a generator let go of closes the stream
        assert next(lines) == "event: response.created"  # in flight, without a key
        error = assert_api_error(httpx.get(f"{base}/models", timeout=30), 429)  # another one without
        assert error["type"] == "rate_limit_error"
        assert httpx.get(f"{base}/models", headers=bearer("sk-any"), timeout=30).status_code == 200
