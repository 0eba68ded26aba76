"""The API service, in layers, each importing only those below it (``lint-imports`` checks them).

``app`` (the Starlette app: its routes and its lifespan) over the two transports: ``http`` (the
HTTP endpoints) and ``ws`` (WebSocket mode's asyncio loop), which read the server's ``config``
and the ``requested_design``; under them the pipeline (``stages``); then the ``edge`` (processes,
sockets, API keys); and at the bottom, apart from each other, the ``stores`` (SQLite, traces) and
``wscore``, WebSocket mode's rules without I/O.
"""
