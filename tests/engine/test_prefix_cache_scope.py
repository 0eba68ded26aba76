"""Cache hits are scoped by key: ``cached_tokens`` never tells one key what another key sent.

A real ``labkit serve`` with one replica (so every request meets the same prefix cache and the
same render cache), driven through the public protocol: HTTP, WebSocket mode and compaction.
A key's own follow-ups hit exactly as they always did.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from labkit.api.extensions import DESIGN_HEADER
from labkit.client.launcher import LabkitServer
from labkit.engine.prefix_cache import PrefixCache, scope_seed
from labkit.engine.render import prefix_digests
from labkit.server.stages.render_cache import RenderCache
from tests.helpers import by_stage, server_spans

MODEL = "labkit-spark"
BLOCK = 16  # the local profile's block size: cached_tokens is a multiple of it


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as srv:  # one replica: one cache for everyone
        yield srv


def new_key() -> str:
    """A key no request has used yet, so its first request finds nothing of its own."""
    return f"sk-labkit-{uuid.uuid4().hex[:12]}"


def long_prompt() -> str:
    """A prompt of a few hundred tokens that no other test sends."""
    return f"Task {uuid.uuid4().hex}. " + "Read the handler before you change the router. " * 30


def create(
    server: LabkitServer, key: str | None, body: dict[str, Any], design: str = "sprint"
) -> dict[str, Any]:
    headers = {DESIGN_HEADER: design, **({"Authorization": f"Bearer {key}"} if key else {})}
    reply = httpx.post(
        f"{server.base_url}/responses",
        json={"model": MODEL, "store": False, **body},
        headers=headers,
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def cached(response: dict[str, Any]) -> int:
    return response["usage"]["input_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("design", ["naive", "sprint"])
def test_a_prompt_hits_for_its_own_key_only(server: LabkitServer, design: str) -> None:
    alice, bob = new_key(), new_key()
    # The same prompt_cache_key too: both land on the same replica, as affinity intends.
    body = {"input": long_prompt(), "prompt_cache_key": "shared-lesson"}
    alice_first, alice_again = create(server, alice, body, design), create(server, alice, body, design)
    bob_first, bob_again = create(server, bob, body, design), create(server, bob, body, design)

    assert cached(alice_first) == 0 and cached(bob_first) == 0  # Alice's prompt says nothing to Bob
    # A key's follow-up hits as it always did: every full block of the prompt.
    assert cached(alice_again) == alice_again["usage"]["input_tokens"] // BLOCK * BLOCK > 0
    assert cached(bob_again) == cached(alice_again)
    assert [r["usage"]["input_tokens"] for r in (alice_first, bob_first, bob_again)] == [
        alice_again["usage"]["input_tokens"]
    ] * 3


def test_replaying_another_keys_conversation_finds_none_of_its_caches(server: LabkitServer) -> None:
    alice, bob = new_key(), new_key()
    history = [{"role": "user", "content": long_prompt()}]
    first = create(server, alice, {"input": history})
    history += [*first["output"], {"role": "user", "content": "And the tests?"}]
    alice_next = create(server, alice, {"input": history})  # the sprint: a stateless follow-up
    bob_replay = create(server, bob, {"input": history})

    assert cached(alice_next) > 0 and cached(bob_replay) == 0
    # The mechanism: the render cache kept Alice's conversation, and only Alice finds it.
    alice_render = by_stage(server_spans(server.base_url, alice_next["id"], key=alice))["render"]
    bob_render = by_stage(server_spans(server.base_url, bob_replay["id"], key=bob))["render"]
    assert alice_render["detail"]["cache"] == "render_cache"
    assert bob_render["detail"]["cache"] == "miss"


def ws_turn(server: LabkitServer, key: str, text: str) -> dict[str, Any]:
    """One response on a new WebSocket connection; the completed response."""
    with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": text, "store": False}))
        while (event := json.loads(ws.recv(timeout=30)))["type"] != "response.completed":
            assert event["type"] != "error", event
    return event["response"]


def test_websocket_mode_is_scoped_by_key_too(server: LabkitServer) -> None:
    alice, bob, prompt = new_key(), new_key(), long_prompt()
    alice_first, alice_again = ws_turn(server, alice, prompt), ws_turn(server, alice, prompt)
    bob_first = ws_turn(server, bob, prompt)
    assert cached(alice_first) == 0 < cached(alice_again)
    assert cached(bob_first) == 0


def compact(server: LabkitServer, key: str, window: list[dict[str, Any]]) -> dict[str, Any]:
    reply = httpx.post(
        f"{server.base_url}/responses/compact",
        json={"model": MODEL, "input": window},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_compaction_is_scoped_by_key_too(server: LabkitServer) -> None:
    alice, bob = new_key(), new_key()
    window = [{"role": "user", "content": long_prompt()}]
    alice_first, alice_again = compact(server, alice, window), compact(server, alice, window)
    bob_first = compact(server, bob, window)
    assert cached(alice_first) == 0 < cached(alice_again)
    assert cached(bob_first) == 0


def test_requests_without_a_key_share_the_anonymous_owner(server: LabkitServer) -> None:
    body = {"input": long_prompt()}
    first, again = create(server, None, body), create(server, None, body)
    keyed = create(server, new_key(), body)
    assert cached(first) == 0 < cached(again)  # no key: one owner, as for stored responses
    assert cached(keyed) == 0


# ---------------------------------------------------------------- the mechanism, in process


def test_owners_views_share_one_cache_but_never_a_chain() -> None:
    shared = PrefixCache(block_size=4, capacity_tokens=64)
    alice, bob = shared.scoped("key_a"), shared.scoped("key_b")
    prompt = list(range(20))
    hashes = alice.insert(prompt)
    assert alice.lookup(prompt) == 20 and bob.lookup(prompt) == 0 and shared.lookup(prompt) == 0
    assert hashes == shared.block_hashes(prompt, seed=scope_seed("key_a")) != shared.block_hashes(prompt)
    # Known hashes carry the owner's seed: a conversation that grows stays the owner's.
    assert alice.lookup([*prompt, *range(20, 28)], hashes) == 20
    assert len(shared) == 5  # one capacity for every owner, as one GPU's memory


def test_render_cache_digests_are_the_owners() -> None:
    items = [{"type": "message", "role": "user", "content": "hi"}]
    assert prefix_digests("h", items, owner="key_a") == prefix_digests("h", items, owner="key_a")
    assert prefix_digests("h", items, owner="key_a") != prefix_digests("h", items, owner="key_b")
    assert prefix_digests("h", items, owner="key_a") != prefix_digests("h", items)
    assert RenderCache().longest_prefix(prefix_digests("h", items, owner="key_b")) == (None, 0)
