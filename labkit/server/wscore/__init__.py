"""WebSocket mode's core, without I/O: one connection's rules (``connection``), the plain data they
move (``connection_jobs``, ``conversation``), its lanes, its connection cache and the bytes its
client's frames hold.

In the manner of the ``websockets`` library's sans-I/O protocol objects, it is fed what happened
and answers what to do: it never awaits, never touches a socket or a file, starts no thread and
holds no clock. ``labkit.server.ws`` is the asyncio layer around it. It imports the wire
(``labkit.api``), the designs, the limits and the engine's data types, and nothing else of the
server: no asyncio, socket, sqlite3, threading, uvicorn, starlette or websockets (the contracts in
``[tool.importlinter]``).
"""
