"""The API service's pipeline: its stages, listed in the order a response meets them.

Each stage is a plain object (or, where it needs nothing but the turn, a function), built here
with what it needs: an entry of the latency profile, and the resources it reads or writes.
``Pipeline`` holds the stages and those resources; the paths run them in their own order: a
response in ``labkit.server.stages.responder`` (and ``labkit.server.stages.appended`` for an appended
rollout's later segments), a compaction pass in ``labkit.server.stages.compaction_pass``.

The stages live with their kind: the network and the door (``labkit.server.stages.door``), before
inference (``labkit.server.stages.pre_inference``), inference (``labkit.server.stages.sampling``), after
inference (``labkit.server.stages.post_inference``). What a stage does under a design comes from the
design's plan (``labkit.designs``), which the cost model reads too.
"""

from __future__ import annotations

from pathlib import Path

from labkit.engine.catalogue import Catalogue
from labkit.engine.policies import GenericPolicy, Policy
from labkit.profiles import Profile
from labkit.server.edge.auth import Keys
from labkit.server.edge.network import ConnectionTracker
from labkit.server.stages.door import Authenticate, Connect, Downlink, Upgrade, Uplink
from labkit.server.stages.post_inference import Bill, OutputSafety, Retain, Storage
from labkit.server.stages.pre_inference import Hydration, InputSafety, Intermediary, Render, Routing, validate
from labkit.server.stages.render_cache import Renderings
from labkit.server.stages.routing import Router
from labkit.server.stages.sampling import Emit, Queue, decode, prefill
from labkit.server.stages.scripts import ScriptLibrary
from labkit.server.stages.slots import EngineSlots, default_share
from labkit.server.stores.billing import Billing, Ledger
from labkit.server.stores.store import ResponseStore
from labkit.server.stores.trace_stream import TraceFeed
from labkit.server.stores.traces import TraceStore

__all__ = ["Emit", "Pipeline"]


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

        # The stages. The network and the door:
        self.connect = Connect(profile.network, self.connections)
        self.upgrade = Upgrade(profile.network)
        self.uplink = Uplink(profile.network)
        self.authenticate = Authenticate(profile.auth, self.keys)
        # Before inference:
        self.validate = validate
        self.hydrate = Hydration(store)
        self.input_safety = InputSafety(profile.safety)
        self.render = Render(self.renderings)
        self.route = Routing(profile.routing, self.router)
        self.intermediary = Intermediary(profile.intermediary)
        # The way back, paid before a segment's first event (response.created, before inference):
        self.downlink = Downlink(profile.network)
        # Inference:
        self.queue = Queue(self.slots)
        self.prefill = prefill
        self.decode = decode
        # After inference:
        self.output_safety = OutputSafety(profile.safety)
        self.retain = Retain(self.renderings)
        self.storage = Storage(store)
        self.bill = Bill(self.billing)

    @property
    def catalogue(self) -> Catalogue:
        return self.router.catalogue
