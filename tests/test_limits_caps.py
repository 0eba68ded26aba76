"""Resources a room of clients cannot grow without bound: every cache and queue has a cap, and
filling it past the cap evicts or refuses instead of growing. Plus the limits on what the
simulated model builds, and ``labkit serve`` refusing to serve a network without keys. (The
per-key caps are tested with the keys, in server/test_auth.py; the connection tracker's bound with the
network, in server/test_network.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labkit.api.safejson import MAX_DEPTH, nesting_depth
from labkit.client.launcher import LabkitServer
from labkit.engine.arguments import MAX_EXAMPLE_CHARS, MAX_EXAMPLE_ITEMS, example_value
from labkit.engine.policies import GenericPolicy, TurnContext
from labkit.engine.prefix_cache import PrefixCache
from labkit.engine.render import TokenBuffer, prefix_digests
from labkit.paths import default_data_dir
from labkit.scenarios import SYNTHETIC_MAX, ScenarioNotFound, load_scenario
from labkit.server.stages.render_cache import BYTES_PER_ID, ENTRY_BYTES, RenderCache, buffer_bytes
from labkit.server.stages.scripts import ScriptLibrary
from labkit.server.stores.traces import Trace, TraceStore
from labkit.text.tokenizer import encode_text

pytestmark = pytest.mark.slow  # hardening

# ---------------------------------------------------------------- caches: filled past their caps


def test_scenario_cache_evicts_past_its_cap() -> None:
    library = ScriptLibrary(default_data_dir(), GenericPolicy(), capacity_bytes=20_000)
    for turns in range(1, 11):
        library.policy_for({"labkit_scenario": f"synthetic:turns={turns},output_tokens=4"})
    assert 1 < len(library) < 10 and library.bytes <= 20_000
    # The most recent names are the ones kept, and a kept one is served from the cache.
    kept = library.policy_for({"labkit_scenario": "synthetic:turns=10,output_tokens=4"})
    assert library.policy_for({"labkit_scenario": "synthetic:turns=10,output_tokens=4"}) is kept


def test_trace_store_keeps_its_capacity() -> None:
    traces = TraceStore(capacity=5)
    for i in range(50):
        traces.put("owner", f"resp_{i}", Trace())
    assert traces.get("owner", "resp_0") is None and traces.get("owner", "resp_49") is not None
    assert sum(traces.get("owner", f"resp_{i}") is not None for i in range(50)) == 5


def test_render_cache_is_bounded_by_the_bytes_its_entries_hold() -> None:
    """Many tiny conversations are bounded by their entries' cost, a few long ones by their tokens."""
    tiny = RenderCache(capacity_bytes=8 * ENTRY_BYTES + 8 * 20 * BYTES_PER_ID)
    for i in range(40):
        items = [{"type": "message", "role": "user", "content": f"hi {i}"}]
        buffer = TokenBuffer.start(None, [])
        buffer.append(items)
        tiny.put(prefix_digests(buffer.system_digest, items)[-1], buffer)
    assert 1 < len(tiny) < 40 and tiny.bytes <= tiny.capacity_bytes < tiny.bytes + buffer_bytes(buffer)
    small = RenderCache(capacity_bytes=ENTRY_BYTES + 50 * BYTES_PER_ID)
    for i in range(40):
        items = [{"type": "message", "role": "user", "content": f"a longer message, number {i} " * 3}]
        buffer = TokenBuffer.start(None, [])
        buffer.append(items)
        small.put(prefix_digests(buffer.system_digest, items)[-1], buffer)
    assert len(small) == 1 and small.bytes <= small.capacity_bytes


def test_prefix_cache_evicts_past_its_capacity() -> None:
    cache = PrefixCache(block_size=16, capacity_tokens=16 * 10)
    for i in range(100):
        cache.insert(encode_text(f"conversation number {i} " * 20))
    assert len(cache) <= 10 and cache.stats.evicted_blocks > 0


# ---------------------------------------------------------------- what the model builds


def test_example_values_stay_small_whatever_the_schema_says() -> None:
    nested: dict = {"type": "string", "minLength": 10**9}
    for _ in range(40):
        nested = {"type": "array", "minItems": 1e30, "items": nested}
    value = example_value(nested)
    assert len(json.dumps(value)) < 200_000
    assert len(example_value({"type": "array", "minItems": 10**40})) == MAX_EXAMPLE_ITEMS
    assert len(example_value({"type": "string", "minLength": 10**40}, "x")) == MAX_EXAMPLE_CHARS


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": [1]},
        {"type": "array", "minItems": "many", "items": 3},
        {"anyOf": {"type": "string"}},
        {"allOf": [1, {"type": "integer", "minimum": "x"}]},
        {"enum": 5},
        {"type": ["null"]},
        {"type": "integer", "minimum": float("nan"), "maximum": float("inf")},
        {"type": "string", "minLength": -5, "maxLength": True},
    ],
)
def test_example_value_never_fails_on_a_malformed_schema(schema: dict) -> None:
    json.dumps(example_value(schema), allow_nan=False)


@pytest.mark.parametrize(
    "ask",
    ["Write 50000000 tokens.", "Write " + "9" * 5000 + " tokens.", "Write 1,000,000 tokens."],
)
def test_the_generic_policy_never_writes_past_its_cap(ask: str) -> None:
    policy = GenericPolicy(max_output_tokens=100)
    [say] = policy.act(TurnContext(items=[{"type": "message", "role": "user", "content": ask}]))
    assert len(encode_text(say.text)) == 100


def test_a_long_answer_with_a_huge_budget_stops_at_the_cap() -> None:
    policy = GenericPolicy(max_output_tokens=100)
    items = [{"type": "message", "role": "user", "content": "Write a long essay."}]
    [say] = policy.act(TurnContext(items=items, max_output_tokens=10**15))
    assert len(encode_text(say.text)) == 100


def test_synthetic_scenarios_are_bounded() -> None:
    data = default_data_dir()
    for key, most in SYNTHETIC_MAX.items():
        with pytest.raises(ValueError):
            load_scenario(f"synthetic:{key}={most + 1}", data)
    for name in ("synthetic:turns=" + "9" * 50, "synthetic:turns=٣", "x" * 200, "a/b", ".hidden"):
        with pytest.raises(ScenarioNotFound):
            load_scenario(name, data)


def test_depth_scan_ignores_brackets_inside_strings() -> None:
    assert nesting_depth('{"a": "[[[[[[", "b": ["]]]]", {"c": "\\"[["}]}') == 3
    assert nesting_depth("[" * (MAX_DEPTH + 1)) == MAX_DEPTH + 1


# ---------------------------------------------------------------- serving a room needs keys


def labkit_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "LABKIT_API_KEYS"}
    return subprocess.run(
        [sys.executable, "-m", "labkit", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**environ, **(env or {})},
    )


def test_serving_a_network_without_keys_is_refused(tmp_path: Path) -> None:
    """Refused before anything is bound: nothing listens, even for a moment."""
    result = labkit_serve("--host", "0.0.0.0", "--port", "0", "--db", str(tmp_path / "r.sqlite3"))
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "--allow-no-keys" in lines[0] and "--api-key" in lines[0] and "0.0.0.0" in lines[0]


def test_a_non_ascii_key_is_refused_at_start(tmp_path: Path) -> None:
    result = labkit_serve("--api-key", "sk-\u00e9", "--port", "0", "--db", str(tmp_path / "r.sqlite3"))
    assert result.returncode != 0 and len(result.stderr.splitlines()) == 1
    assert "printable ASCII" in result.stderr


# ---------------------------------------------------------------- a large body keeps the loop free

LARGE_WORD_CHARS = 2 * 1024 * 1024 - 4096  # one 2 MiB "word": the tokenizer's slowest input


@pytest.fixture(scope="module")
def instant_prefill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    """The local profile and a model that prefills in no time: the request is the service's work."""
    models = tmp_path_factory.mktemp("models") / "models.toml"
    models.write_text('[models.instant]\ndescription = "x"\ndecode_tps = 100000\nprefill_tps = 1000000000\n')
    with LabkitServer(args=["--profile", "local", "--models", str(models)]) as srv:
        yield srv


def test_healthz_answers_while_a_large_body_is_tokenized(instant_prefill: LabkitServer) -> None:
    """Render and input_safety tokenize a large input in a worker thread, so the event loop
    keeps answering everyone else meanwhile; a small input stays on the loop (no thread hop)."""
    server = instant_prefill
    health = server.base_url.removesuffix("/v1") + "/healthz"
    body = {"model": "instant", "input": "a" * LARGE_WORD_CHARS, "max_output_tokens": 16, "store": False}
    outcome: dict[str, httpx.Response] = {}

    def send() -> None:
        outcome["reply"] = httpx.post(f"{server.base_url}/responses", json=body, timeout=120)

    sender = threading.Thread(target=send)
    latencies: list[float] = []
    with httpx.Client(timeout=30) as client:
        sender.start()
        while sender.is_alive():
            asked = time.perf_counter()
            assert client.get(health).status_code == 200
            latencies.append(time.perf_counter() - asked)
            time.sleep(0.02)
    sender.join()
    reply = outcome["reply"]
    assert reply.status_code == 200, reply.text[:300]
    assert len(latencies) >= 5  # the poller ran while the body was being worked on

    # The mechanism, from the spans: both stages worked off the loop for the large input only.
    def threads(response_id: str) -> dict[str, int]:
        traces = httpx.get(
            f"{server.base_url}/labkit/traces", params={"response_id": response_id}, timeout=30
        ).json()["data"]
        return {s["stage"]: s["detail"].get("threads", 0) for s in traces if s["stage"] in STAGES}

    large = threads(reply.json()["id"])
    assert large["input_safety"] == 1 and large["render"] >= 1  # the sprint's render: hash, then encode
    small = httpx.post(f"{server.base_url}/responses", json={**body, "input": "Say hi."}, timeout=30)
    assert threads(small.json()["id"]) == {"input_safety": 0, "render": 0}


STAGES = ("input_safety", "render")
