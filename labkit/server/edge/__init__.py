"""Where the server meets its machine and its clients, under the pipeline: its processes
(``workers``), stopping (``shutdown``), each connection's socket and what it may cost (``network``,
``wire_limits``, ``half_close``, ``descriptors``), a connection's outgoing frames (``outbox``), the
API keys (``auth``) and the system timer (``timer``).

It may import the ``stores`` and the bytes a WebSocket client's frames hold
(``labkit.server.wscore.held_bytes``); never the pipeline, the transports or ``app``.
"""
