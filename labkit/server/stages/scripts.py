"""Which policy answers a request: the generic one, or the scenario ``metadata.labkit_scenario`` names.

Scenario policies are loaded once per name and kept, so a rollout's later turns do not
read the scenario file again. The names come from clients, and a synthetic name builds
a scenario of the size it asks for (up to ``SYNTHETIC_MAX``: tens of megabytes), so the
kept ones are a least-recently-used cache (``cachetools``) bounded by the bytes they
hold, ``MAX_SCENARIO_BYTES`` by ``policy_bytes``: a client cycling through distinct
names evicts old entries instead of growing the server, and a scenario larger than the
whole cache is built for its request and not kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cachetools import LRUCache

from labkit.api.errors import invalid_request
from labkit.api.extensions import SCENARIO_KEY
from labkit.engine.policies import Policy, ScriptedPolicy
from labkit.scenarios import ScenarioNotFound, load_scenario

PARAM = f"metadata.{SCENARIO_KEY}"
MAX_SCENARIO_BYTES = 32 * 2**20  # the scenarios kept: under 50 MB whatever the names
ENTRY_BYTES = 1024  # an entry's name (metadata values are at most 512 characters) and bookkeeping


def policy_bytes(policy: ScriptedPolicy) -> int:
    """What a loaded scenario holds: its steps, their actions and texts, each object counted
    once (steps repeat: a step of k calls is listed k times), plus its entry in the cache.

    >>> from labkit.engine.policies import Say
    >>> small, large = ScriptedPolicy([[Say("Done.")]]), ScriptedPolicy([[Say("Done. " * 1000)]])
    >>> policy_bytes(large) - policy_bytes(small)  # the text's characters, one byte each
    5995
    """
    seen: set[int] = set()

    def size(obj: object) -> int:
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return sys.getsizeof(obj)

    total = ENTRY_BYTES + size(policy) + size(vars(policy)) + size(policy.steps)
    for step in policy.steps:
        total += size(step)
        for action in step:
            fields = vars(action)
            total += size(action) + size(fields) + sum(size(value) for value in fields.values())
    return total


class ScriptLibrary:
    def __init__(
        self, data_dir: Path | None, default: Policy, capacity_bytes: int = MAX_SCENARIO_BYTES
    ) -> None:
        self.data_dir = data_dir
        self.default = default
        self._loaded: LRUCache[str, ScriptedPolicy] = LRUCache(capacity_bytes, getsizeof=policy_bytes)

    def __len__(self) -> int:
        return len(self._loaded)

    @property
    def bytes(self) -> int:
        """What the kept scenarios hold, by ``policy_bytes``: at most ``capacity_bytes``."""
        return int(self._loaded.currsize)

    @property
    def capacity_bytes(self) -> int:
        return int(self._loaded.maxsize)

    def policy_for(self, metadata: dict[str, str] | None) -> Policy:
        """The generic policy, or the named scenario's scripted one (an unknown name is a 400)."""
        name = (metadata or {}).get(SCENARIO_KEY)
        if not name:
            return self.default
        found = self._loaded.get(name)  # a hit is now the most recently used
        if found is not None:
            return found
        if self.data_dir is None:
            raise invalid_request("This server has no scenarios.", param=PARAM)
        try:
            steps = load_scenario(name, self.data_dir).steps
        except ScenarioNotFound as exc:
            raise invalid_request(str(exc), param=PARAM, code="invalid_value") from None
        except ValueError as exc:  # a synthetic size out of range
            raise invalid_request(f"Invalid scenario: {exc}.", param=PARAM, code="invalid_value") from None
        policy = ScriptedPolicy.from_steps(steps)
        if policy_bytes(policy) <= self.capacity_bytes:
            self._loaded[name] = policy
        return policy
