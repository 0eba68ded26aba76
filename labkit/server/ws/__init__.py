"""WebSocket mode's I/O: the asyncio loop around one connection's rules (``websocket``, around
``labkit.server.wscore``), the writer that puts its events on the socket (``writer``), the
bounds on what a client's frames cost in the protocol uvicorn runs (``protocol``), and the guard
around a learner's connection cache (``learner_cache``).

It may import the server's ``config`` and ``requested_design``, the pipeline (``stages``), the
``edge``, the ``stores`` and the core; never ``http`` or ``app``.
"""
