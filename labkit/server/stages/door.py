"""The network and the door: the stages between the client and the API service.

    connect       open a connection (TCP + TLS round trips), where one is really opened
    upgrade       WebSocket mode: the upgrade request and its answer
    uplink        the request crossing the network
    auth          the key check, and the auth service hop
    downlink      the network back to the client: one one-way delay, held before a segment's
                  first event, that every later event of the segment carries too

Each stage is an object built with the profile entry (and the resources) it needs; calling it
runs the stage for one request. ``labkit.server.stages.pipeline.Pipeline`` builds them.
"""

from __future__ import annotations

from labkit.api.stages import Stage
from labkit.engine import timing
from labkit.profiles import Auth, Network
from labkit.server.edge.auth import Keys
from labkit.server.edge.network import ConnectionTracker
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stores.traces import Trace


class Connect:
    """Pay the handshakes if this request opened a connection (read off the real socket)."""

    def __init__(self, network: Network, connections: ConnectionTracker) -> None:
        self.network, self.connections = network, connections

    async def __call__(
        self, trace: Trace, client: tuple[str, int] | None, *, new: bool | None = None
    ) -> None:
        opened = self.connections.is_new(client) if new is None else new
        with trace.stage(Stage.CONNECT, new_connection=opened):
            if opened:
                await timing.sleep(self.network.handshake_s())


class Upgrade:
    """WebSocket mode: the upgrade request and its 101 answer, one round trip."""

    def __init__(self, network: Network) -> None:
        self.network = network

    async def __call__(self, trace: Trace) -> None:
        with trace.stage(Stage.UPGRADE):
            await timing.sleep(self.network.rtt_ms / 1000)


class Uplink:
    """The request crossing the network to the service: one one-way delay."""

    def __init__(self, network: Network) -> None:
        self.network = network

    async def __call__(self, trace: Trace) -> None:
        with trace.stage(Stage.UPLINK):
            await timing.sleep(self.network.one_way_s())


class Authenticate:
    """The real key check, plus the auth service hop; returns the owner id."""

    def __init__(self, auth: Auth, keys: Keys) -> None:
        self.auth, self.keys = auth, keys

    async def __call__(self, trace: Trace, authorization: str | None) -> str:
        with trace.stage(Stage.AUTH):
            owner = self.keys.owner(authorization)
            await timing.sleep(self.auth.hop_ms / 1000)
        return owner


class Downlink:
    """The network back to the client, paid once per segment before its first event: every event
    after it reaches the client one one-way delay later, as over a real network. For a response
    that first event is ``response.created``, sent before queue and prefill; for an appended
    rollout's resumed segment, its first delta, after prefill (``labkit.server.stages.responder``)."""

    def __init__(self, network: Network) -> None:
        self.network = network

    async def __call__(self, run: ResponseRun) -> None:
        if run.depart():
            with run.trace.stage(Stage.DOWNLINK):
                await timing.sleep(self.network.one_way_s())
