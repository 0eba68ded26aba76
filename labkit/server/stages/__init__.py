"""The pipeline: a response's stages, in the order it meets them (``pipeline`` builds them: the
network and the door, before inference, inference, after inference), the run that carries one
response through them (``response_run``: ``ResponseRun``), the one runner that walks them as the design's
plan has them (``runner``), and the paths that call it: one response (``responder``), an appended
rollout (``appended``), a compaction (``compaction_pass``).

It may import the ``edge`` (API keys, the connections' tracker), the ``stores`` and the WebSocket
core's plain data; never the transports (``http``, ``ws``), their ``config`` or ``app``.
"""
