"""The network and the door: the stages between the client and the API service.

    connect       open a connection (TCP + TLS round trips), where one is really opened
    upgrade       WebSocket mode: the upgrade request and its answer
    uplink        the request crossing the network
    auth          the key check, and the auth service hop
    downlink      the network back to the client: one one-way delay, held before a segment's
                  first event, that every later event of the segment carries too

Each stage is an object built with the profile entry (and the resources) it needs;
``labkit.server.stages.pipeline.Pipeline`` builds them. The door's stages (connect, upgrade, auth)
come before a response's run exists, and over WebSocket once per connection: each is called with
the request at the door (``Door``: its trace, its socket's address, its key), and auth writes the
owner onto it. The network's two crossings are paid wherever a request or a segment's first event
crosses, inside a connection too: uplink with the request's trace (a WebSocket create, an appended
rollout's input, which do not pass the door again), downlink with the response's run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.api.stages import Stage
from labkit.engine import timing
from labkit.profiles import Auth, Network
from labkit.server.edge.auth import Keys
from labkit.server.edge.network import ConnectionTracker
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stores.traces import Trace


@dataclass
class Door:
    """A request at the door, before its response's run exists: what the door's stages read, and
    the owner auth finds.

    >>> door = Door(client=("127.0.0.1", 50123), authorization="Bearer sk-local")
    >>> door.trace.spans, door.owner
    ([], '')
    """

    trace: Trace = field(default_factory=Trace)
    client: tuple[str, int] | None = None  # the socket's address: a keep-alive connection is known by it
    new_connection: bool | None = None  # known to the transport (a WebSocket upgrade), or read off the socket
    authorization: str | None = None  # the request's Authorization header
    owner: str = ""  # the key's owner id, once auth has checked it


class Connect:
    """Pay the handshakes if this request opened a connection (read off the real socket)."""

    def __init__(self, network: Network, connections: ConnectionTracker) -> None:
        self.network, self.connections = network, connections

    async def __call__(self, door: Door) -> None:
        opened = self.connections.is_new(door.client) if door.new_connection is None else door.new_connection
        with door.trace.stage(Stage.CONNECT, new_connection=opened):
            if opened:
                await timing.sleep(self.network.handshake_s())


class Upgrade:
    """WebSocket mode: the upgrade request and its 101 answer, one round trip."""

    def __init__(self, network: Network) -> None:
        self.network = network

    async def __call__(self, door: Door) -> None:
        with door.trace.stage(Stage.UPGRADE):
            await timing.sleep(self.network.rtt_ms / 1000)


class Uplink:
    """The request crossing the network to the service: one one-way delay."""

    def __init__(self, network: Network) -> None:
        self.network = network

    async def __call__(self, trace: Trace) -> None:
        with trace.stage(Stage.UPLINK):
            await timing.sleep(self.network.one_way_s())


class Authenticate:
    """The real key check, plus the auth service hop; the owner id goes onto the door's request."""

    def __init__(self, auth: Auth, keys: Keys) -> None:
        self.auth, self.keys = auth, keys

    async def __call__(self, door: Door) -> None:
        with door.trace.stage(Stage.AUTH):
            door.owner = self.keys.owner(door.authorization)
            await timing.sleep(self.auth.hop_ms / 1000)


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
