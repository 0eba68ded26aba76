"""The API service's stages: each one small, named, and recording a span of what it did.

The network and the door (here):

    connect       open a connection (TCP + TLS round trips), where one is really opened
    upgrade       WebSocket mode: the upgrade request and its answer
    uplink        the request crossing the network
    auth          the key check, and the auth service hop
    downlink      the network back to the client: one one-way delay, held before a response's
                  first event (response.created, so before inference), that every later event
                  and the first token carry too

Before inference (``labkit.server.pre_inference``): validation, hydration, input_safety,
render, routing, intermediary. Inference (``labkit.server.sampling``): queue, prefill,
decode. After inference (``labkit.server.post_inference``): output_safety, retain,
storage, billing.

What a stage does under a design comes from the design's plan (``labkit.designs``).
Every path runs the same stage functions, in its own order: a response in
``labkit.server.responder`` (and ``labkit.server.appended`` for an appended rollout's later
segments), a compaction pass in ``labkit.server.compact``.
"""

from __future__ import annotations

from pathlib import Path

from labkit.api.events import Event
from labkit.api.stages import Stage
from labkit.engine import timing
from labkit.engine.catalogue import Catalogue
from labkit.engine.policies import GenericPolicy, Policy
from labkit.profiles import Profile
from labkit.server.auth import Keys
from labkit.server.billing import Billing, Ledger
from labkit.server.network import ConnectionTracker
from labkit.server.post_inference import PostInference
from labkit.server.pre_inference import PreInference
from labkit.server.render_cache import Renderings
from labkit.server.routing import Router
from labkit.server.sampling import Emit, Sampling
from labkit.server.scripts import ScriptLibrary
from labkit.server.slots import EngineSlots, default_share
from labkit.server.store import ResponseStore
from labkit.server.trace_stream import TraceFeed
from labkit.server.traces import Trace, TraceStore
from labkit.server.turn import Turn

__all__ = ["Emit", "Pipeline"]


class Pipeline(PreInference, Sampling, PostInference):
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

    @property
    def catalogue(self) -> Catalogue:
        return self.router.catalogue

    # ------------------------------------------------------------ the network and the door

    async def connect(self, trace: Trace, client: tuple[str, int] | None, *, new: bool | None = None) -> None:
        """Pay the handshakes if this request opened a connection (read off the real socket)."""
        opened = self.connections.is_new(client) if new is None else new
        with trace.stage(Stage.CONNECT, new_connection=opened):
            if opened:
                await timing.sleep(self.profile.network.handshake_s())

    async def upgrade(self, trace: Trace) -> None:
        """WebSocket mode: the upgrade request and its 101 answer, one round trip."""
        with trace.stage(Stage.UPGRADE):
            await timing.sleep(self.profile.network.rtt_ms / 1000)

    async def uplink(self, trace: Trace) -> None:
        with trace.stage(Stage.UPLINK):
            await timing.sleep(self.profile.network.one_way_s())

    async def authenticate(self, trace: Trace, authorization: str | None) -> str:
        """The real key check, plus the auth service hop; returns the owner id."""
        with trace.stage(Stage.AUTH):
            owner = self.keys.owner(authorization)
            await timing.sleep(self.profile.auth.hop_ms / 1000)
        return owner

    async def downlink(self, turn: Turn) -> None:
        """The network back to the client, paid once per segment before its first event: every
        event after it reaches the client one one-way delay later, as over a real network. For a
        response that first event is ``response.created``, sent before queue and prefill; for an
        appended rollout's resumed segment, its first delta, after prefill."""
        if turn.depart():
            with turn.trace.stage(Stage.DOWNLINK):
                await timing.sleep(self.profile.network.one_way_s())

    def sender(self, turn: Turn, emit: Emit) -> Emit:
        """``emit`` for this turn, paying the downlink before the first event of each segment."""

        async def send(event: Event) -> None:
            if not turn.departed:  # checked here: every delta comes this way
                await self.downlink(turn)
            await emit(event)

        return send
