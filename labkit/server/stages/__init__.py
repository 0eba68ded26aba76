"""The pipeline: a response's stages, in the order it meets them (``pipeline`` lists them: the
network and the door, before inference, inference, after inference), the turn that carries one
response through them (``turn``), and the paths that run them: one response (``responder``), an
appended rollout (``appended``), a compaction (``compaction_pass``).

It may import the ``edge`` (API keys, the connections' tracker), the ``stores`` and the WebSocket
core's plain data; never the transports (``http``, ``ws``), their ``config`` or ``app``.
"""
