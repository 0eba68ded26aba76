"""Which policy answers a request: the generic one, or the scenario ``metadata.labkit_scenario`` names.

Scenario policies are loaded once per name and kept, so a rollout's later
turns do not read the scenario file again. The names come from clients, so the
cache is a bounded LRU (``MAX_SCENARIOS``): a client cycling through distinct
synthetic names evicts old entries instead of growing the server.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from labkit.api.errors import invalid_request
from labkit.api.extensions import SCENARIO_KEY
from labkit.engine.policies import Policy, ScriptedPolicy
from labkit.scenarios import ScenarioNotFound, load_scenario

PARAM = f"metadata.{SCENARIO_KEY}"
MAX_SCENARIOS = 64


class ScriptLibrary:
    def __init__(self, data_dir: Path | None, default: Policy, capacity: int = MAX_SCENARIOS) -> None:
        self.data_dir = data_dir
        self.default = default
        self.capacity = capacity
        self._loaded: OrderedDict[str, Policy] = OrderedDict()

    def __len__(self) -> int:
        return len(self._loaded)

    def policy_for(self, metadata: dict[str, str] | None) -> Policy:
        """The generic policy, or the named scenario's scripted one (an unknown name is a 400)."""
        name = (metadata or {}).get(SCENARIO_KEY)
        if not name:
            return self.default
        found = self._loaded.get(name)
        if found is not None:
            self._loaded.move_to_end(name)
            return found
        if self.data_dir is None:
            raise invalid_request("This server has no scenarios.", param=PARAM)
        try:
            steps = load_scenario(name, self.data_dir).steps
        except ScenarioNotFound as exc:
            raise invalid_request(str(exc), param=PARAM, code="invalid_value") from None
        except ValueError as exc:  # a synthetic size out of range
            raise invalid_request(f"Invalid scenario: {exc}.", param=PARAM, code="invalid_value") from None
        policy = self._loaded[name] = ScriptedPolicy.from_steps(steps)
        while len(self._loaded) > self.capacity:
            self._loaded.popitem(last=False)
        return policy
