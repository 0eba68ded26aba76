"""Routing: a model name resolved to its configuration, and a request sent to an engine replica.

Over loopback against the session's ``production-like`` server (4 replicas): a conversation with
a ``prompt_cache_key`` stays on one replica (so its prefix is cached there), requests without one
go round robin, and a WebSocket connection stays on the replica of its first response; which
replica served a response is read off its routing span. In process: the choice of a replica
by cache key, the configuration cache, and each owner's view of a replica's prefix cache.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.engine.catalogue import UnknownModel, load_catalogue
from labkit.engine.prefix_cache import ScopedCache, scope_seed
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.server.stages.routing import Router
from tests.helpers import by_stage, server_spans, ws_connect, ws_turn

MODEL = "labkit-spark"
REPO_DATA = default_data_dir()


def unique_instructions() -> str:
    return f"Session {uuid.uuid4().hex}. You are a careful coding agent. " + "Read before you write. " * 20


def conversation(client: OpenAI, turns: int, **options: Any) -> list[Any]:
    """Stateless turns of one conversation (whole history each time); the responses."""
    instructions, history, responses = unique_instructions(), [], []
    for i in range(turns):
        history.append({"role": "user", "content": f"Step {i}: say something short."})
        response = client.responses.create(
            model=MODEL, instructions=instructions, input=history, store=False, **options
        )
        responses.append(response)
        history += [{"role": "assistant", "content": response.output_text}]
    return responses


def replica_of(server: LabkitServer, response_id: str) -> str:
    return by_stage(server_spans(server.base_url, response_id))["routing"]["detail"]["replica"]


def test_prompt_cache_key_keeps_a_conversation_on_one_replica(client: OpenAI, server: LabkitServer) -> None:
    responses = conversation(client, 4, prompt_cache_key=f"conv-{uuid.uuid4().hex}")
    assert len({replica_of(server, r.id) for r in responses}) == 1
    assert responses[0].usage.input_tokens_details.cached_tokens == 0
    for later in responses[1:]:
        assert later.usage.input_tokens_details.cached_tokens > 0


def test_without_a_key_requests_round_robin_over_the_replicas(client: OpenAI, server: LabkitServer) -> None:
    assert load_profile("production-like", REPO_DATA).engine.replicas == 4
    responses = conversation(client, 4)
    assert sorted(replica_of(server, r.id) for r in responses) == [f"replica-{i}" for i in range(4)]
    # Each request met a replica that had never seen this conversation.
    assert [r.usage.input_tokens_details.cached_tokens for r in responses] == [0] * 4


def test_a_websocket_connection_stays_on_one_replica(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        # Independent responses without a cache key: over HTTP these would round-robin.
        ids = [ws_turn(ws, input=f"Hello {i}.", store=False)["id"] for i in range(4)]
        chained = ws_turn(ws, input="And again.", previous_response_id=ids[-1], store=False)["id"]
    assert len({replica_of(server, rid) for rid in ids}) == 1
    assert by_stage(server_spans(server.base_url, chained))["routing"]["detail"] == {"reused": True}


# ---------------------------------------------------------------- the router, in process


def router(replicas: int = 4) -> Router:
    return Router(load_catalogue(), replicas, block_size=16, cache_capacity_tokens=4096)


def test_a_replica_keeps_the_cache_the_profile_sized() -> None:
    # An empty cache has no length: it must still be the one the router built from the profile.
    router = Router(load_catalogue(), 2, block_size=32, cache_capacity_tokens=2_000_000)
    for replica in router.replicas:
        assert (replica.cache.block_size, replica.cache.capacity_blocks) == (32, 2_000_000 // 32)


@pytest.mark.parametrize("key", ["conv-1", "conv-2", "a much longer prompt cache key", "é"])
def test_a_prompt_cache_key_picks_the_replica_its_hash_names(key: str) -> None:
    routes = router()
    digest = hashlib.sha256(key.encode()).digest()
    named = f"replica-{int.from_bytes(digest[:8], 'big') % 4}"
    assert [routes.pick(key).name for _ in range(5)] == [named] * 5


def test_without_a_cache_key_requests_take_the_replicas_in_turn() -> None:
    routes = router(3)
    assert [routes.pick(None).name for _ in range(7)] == [f"replica-{i % 3}" for i in range(7)]
    assert routes.pick("").name == "replica-1"  # an empty key is no key: the turn goes on


def test_a_model_configuration_is_fetched_once_then_cached() -> None:
    routes = router()
    assert routes.cached_config(MODEL) is None
    fetched = routes.fetch_config(MODEL)
    assert fetched.name == MODEL and routes.cached_config(MODEL) is fetched
    with pytest.raises(UnknownModel, match="labkit-no-such-model"):
        routes.fetch_config("labkit-no-such-model")
    assert routes.cached_config("labkit-no-such-model") is None


def test_a_request_gets_its_owners_view_of_the_replica() -> None:
    routes = router()
    replica = routes.replicas[0]
    mine = routes.pick(None, "key_a")
    assert mine.name == replica.name and isinstance(mine.cache, ScopedCache)
    assert mine.cache.cache is replica.cache and mine.cache.seed == scope_seed("key_a")
    mine.cache.insert(list(range(64)))  # into the replica's one cache, under key_a's chains
    assert len(replica.cache) == 4 and replica.cache.lookup(list(range(64))) == 0


def test_without_an_owner_it_is_the_replica_itself() -> None:
    routes = router()
    assert routes.pick(None).cache is routes.replicas[0].cache  # every key's view at once
