"""Which policy answers a request: the generic one, or the scenario ``metadata.labkit_scenario`` names.

Scenario policies are loaded once per name and kept, so a rollout's later
turns do not read the scenario file again.
"""

from __future__ import annotations

from pathlib import Path

from labkit.api.errors import invalid_request
from labkit.api.extensions import SCENARIO_KEY
from labkit.engine.policies import Policy, ScriptedPolicy
from labkit.scenarios import ScenarioNotFound, load_scenario

PARAM = f"metadata.{SCENARIO_KEY}"


class ScriptLibrary:
    def __init__(self, data_dir: Path | None, default: Policy) -> None:
        self.data_dir = data_dir
        self.default = default
        self._loaded: dict[str, Policy] = {}

    def policy_for(self, metadata: dict[str, str] | None) -> Policy:
        """The generic policy, or the named scenario's scripted one (an unknown name is a 400)."""
        name = (metadata or {}).get(SCENARIO_KEY)
        if not name:
            return self.default
        if name not in self._loaded:
            if self.data_dir is None:
                raise invalid_request("This server has no scenarios.", param=PARAM)
            try:
                steps = load_scenario(name, self.data_dir).steps
            except ScenarioNotFound as exc:
                raise invalid_request(str(exc), param=PARAM, code="invalid_value") from None
            self._loaded[name] = ScriptedPolicy.from_steps(steps)
        return self._loaded[name]
