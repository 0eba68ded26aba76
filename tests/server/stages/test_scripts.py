"""The scenario cache holds under 50 MB whatever names its clients send: by its own accounting,
which is an upper bound of what a loaded scenario really holds (tracemalloc), and on a real
server, whose memory grows by little more than the cache's bound however many distinct
scenarios it is asked for.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from labkit.engine.policies import GenericPolicy, ScriptedPolicy
from labkit.paths import default_data_dir
from labkit.scenarios import parse_synthetic
from labkit.server.stages.scripts import ENTRY_BYTES, MAX_SCENARIO_BYTES, ScriptLibrary, policy_bytes
from tests.helpers import auth_headers

MB = 10**6
# About 5 MB each once loaded (499 calls of 2,000 tokens): 64 of them would hold 320 MB unbounded.
LARGE = "synthetic:turns=500,output_tokens=2000,tool_tokens=0,instruction_tokens={}"
NAMES = 64  # as many as a cache bounded by its entries (not their bytes) would keep


def ask(library: ScriptLibrary, name: str) -> object:
    return library.policy_for({"labkit_scenario": name})


def test_the_bound_is_under_50_mb() -> None:
    assert MAX_SCENARIO_BYTES < 50 * MB


def test_distinct_large_scenarios_fill_it_to_its_bound_and_no_further() -> None:
    library = ScriptLibrary(default_data_dir(), GenericPolicy())
    for i in range(NAMES):
        ask(library, LARGE.format(i))
        assert library.bytes <= library.capacity_bytes == MAX_SCENARIO_BYTES
    assert library.bytes > MAX_SCENARIO_BYTES - 2 * policy_bytes(ask(library, LARGE.format(0)))  # full
    assert 1 < len(library) < NAMES
    # The most recent are the ones kept, and a kept one is served from the cache.
    newest = ask(library, LARGE.format(NAMES - 1))
    assert ask(library, LARGE.format(NAMES - 1)) is newest


def test_small_scenarios_are_kept_by_the_same_bound() -> None:
    library = ScriptLibrary(default_data_dir(), GenericPolicy(), capacity_bytes=200_000)
    for turns in range(1, 200):
        ask(library, f"synthetic:turns={turns},output_tokens=4,instruction_tokens=0")
    assert library.bytes <= 200_000 and 1 < len(library) < 199
    kept = ask(library, "synthetic:turns=199,output_tokens=4,instruction_tokens=0")
    assert ask(library, "synthetic:turns=199,output_tokens=4,instruction_tokens=0") is kept


def test_a_scenario_larger_than_the_cache_is_served_and_not_kept() -> None:
    library = ScriptLibrary(default_data_dir(), GenericPolicy(), capacity_bytes=1 * MB)
    ask(library, "synthetic:turns=2,output_tokens=4")
    policy = ask(library, LARGE.format(0))
    assert isinstance(policy, ScriptedPolicy) and len(policy.steps) == 500
    assert len(library) == 1 and ask(library, LARGE.format(0)) is not policy


@pytest.mark.parametrize(
    "name",
    [
        LARGE.format(0),
        "synthetic:turns=1000,output_tokens=16,instruction_tokens=0",
        "synthetic:turns=3,output_tokens=10",
    ],
)
def test_the_accounting_covers_what_a_scenario_holds(name: str) -> None:
    steps = parse_synthetic(name).steps
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        policy = ScriptedPolicy.from_steps(steps)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= policy_bytes(policy) <= ENTRY_BYTES + 2 * held  # an upper bound, and a close one


# ---------------------------------------------------------------- on a real server


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a process's memory from /proc")
def test_a_server_asked_for_many_distinct_scenarios_stays_within_its_bound() -> None:
    """64 distinct 5 MB scenarios grew a server by about 310 MB when 64 entries were kept; now
    by the cache's bound (32 MiB) and what the allocator keeps around it: under 64 MiB."""
    with (
        LabkitServer(args=["--profile", "local"]) as server,
        httpx.Client(base_url=server.base_url, headers=auth_headers(), timeout=60) as http,
    ):
        assert server.process is not None

        def create(name: str) -> None:
            body = {"model": "labkit-spark", "input": "Go.", "generate": False, "store": False}
            reply = http.post("/responses", json={**body, "metadata": {"labkit_scenario": name}})
            assert reply.status_code == 200, reply.text

        for i in range(3):  # warm: the first scenarios load what every later one uses
            create(f"synthetic:turns=2,output_tokens=4,instruction_tokens={i}")
        before = rss_bytes(server.process.pid)
        for i in range(NAMES):
            create(LARGE.format(i))
        grown = rss_bytes(server.process.pid) - before
    assert grown < 64 * 2**20, f"the server grew by {grown / 2**20:.0f} MiB"
