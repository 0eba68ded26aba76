"""The API service's pipeline: its stages, and the resources they use.

``Pipeline`` holds the stages and those resources (stores, router, caches, billing). Three kinds of
stage, each with the shape its place in a request gives it:

- **The runner's**, from validation on (but the downlink and inference): one shape, a class that
  names its stage, is built from the pipeline (``labkit.server.stages.runner.RunnerStage``) and is
  called with the response's run. Each module lists its own (``STAGES``), and ``Pipeline.stages``
  holds them all in ``Stage`` order: no line here for a new one. The runner
  (``labkit.server.stages.runner``) runs those the design's plan names, in its order, for a response
  (``labkit.server.stages.responder``), an appended rollout's later segments
  (``labkit.server.stages.appended``) and a compaction pass (``labkit.server.stages.compaction_pass``).
- **The door's** (connect, upgrade, auth), called by name with the request at the door
  (``labkit.server.stages.door.Door``): they come before a response's run exists, and over
  WebSocket once per connection; the network's uplink and downlink, paid inside a connection too,
  take the request's trace and the response's run.
- **Inference's** (queue, prefill, decode), called by name (``labkit.server.stages.responder.infer``):
  the replica's slot must be held around prefill and decode and freed whatever ends them, so the
  queue is a context manager; decode streams the segment's events through what its caller gives it
  (a response's ``emit``, a compaction pass's own).

The stages live with their kind: the network and the door (``labkit.server.stages.door``), before
inference (``labkit.server.stages.pre_inference``), inference (``labkit.server.stages.sampling``), after
inference (``labkit.server.stages.post_inference``). What a stage does under a design comes from the
design's plan (``labkit.designs``), which the cost model reads too.
"""

from __future__ import annotations

from pathlib import Path

from labkit.api.stages import Stage
from labkit.engine.catalogue import Catalogue
from labkit.engine.policies import GenericPolicy, Policy
from labkit.profiles import Profile
from labkit.server.edge.auth import Keys
from labkit.server.edge.network import ConnectionTracker
from labkit.server.stages import post_inference, pre_inference
from labkit.server.stages.door import Authenticate, Connect, Downlink, Upgrade, Uplink
from labkit.server.stages.render_cache import Renderings
from labkit.server.stages.routing import Router
from labkit.server.stages.runner import RunnerStage, StageCall, build_stages
from labkit.server.stages.sampling import Emit, Queue, decode, prefill
from labkit.server.stages.scripts import ScriptLibrary
from labkit.server.stages.slots import EngineSlots, default_share
from labkit.server.stores.billing import Billing, Ledger
from labkit.server.stores.store import ResponseStore
from labkit.server.stores.trace_stream import TraceFeed
from labkit.server.stores.traces import TraceStore

__all__ = ["Emit", "Pipeline"]

#: The runner's stages, each module's own list: a new stage joins its module's ``STAGES``.
RUNNER_STAGES: tuple[type[RunnerStage], ...] = (*pre_inference.STAGES, *post_inference.STAGES)


class Pipeline:
    """The stages, and the resources they use (stores, router, caches, billing)."""

    def __init__(
        self,
        catalogue: Catalogue,
        profile: Profile,
        store: ResponseStore,
        ledger: Ledger,
        *,
        keys: Keys | None = None,
        data_dir: Path | None = None,
        traces: TraceStore | None = None,
        policy: Policy | None = None,
        slots_per_key: int | None = None,
    ) -> None:
        self.profile = profile
        self.store = store
        self.keys = keys or Keys()
        self.router = Router(
            catalogue,
            profile.engine.replicas,
            block_size=profile.engine.block_size,
            cache_capacity_tokens=profile.engine.cache_capacity_tokens,
        )
        # A key's share of each replica's slots: by default, where keys are required (--max-slots-per-key).
        share = slots_per_key or default_share(profile.engine.max_concurrent, bool(self.keys.required))
        self.slots = {r.name: EngineSlots(profile.engine.max_concurrent, share) for r in self.router.replicas}
        self.renderings = Renderings()  # the render cache's one way in
        self.billing = Billing(ledger, profile.billing.hop_ms / 1000)
        self.connections = ConnectionTracker()
        self.scripts = ScriptLibrary(data_dir, policy or GenericPolicy())
        self.traces = traces or TraceStore()
        self.feed = TraceFeed()  # subscribers to finished responses' traces

        # The network and the door, before a response's run exists: called with the request at the door.
        self.connect = Connect(profile.network, self.connections)
        self.upgrade = Upgrade(profile.network)
        self.uplink = Uplink(profile.network)
        self.authenticate = Authenticate(profile.auth, self.keys)
        # The stages a runner walks, in ``Stage`` order: each built from this pipeline, called with the run.
        self.stages: dict[Stage, StageCall] = build_stages(RUNNER_STAGES, self)
        # The way back, paid before a segment's first event (response.created, before inference):
        self.downlink = Downlink(profile.network)
        # Inference: the slot is held around prefill and decode (a context manager), and decode
        # streams the segment's events.
        self.queue = Queue(self.slots)
        self.prefill = prefill
        self.decode = decode

    @property
    def catalogue(self) -> Catalogue:
        return self.router.catalogue
