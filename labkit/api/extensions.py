"""labkit's own additions to the wire, named once for the server and the client.

None of them changes a standard shape: a standard client never sends them and
never sees them unless it asks.
"""

from __future__ import annotations

DESIGN_HEADER = "x-labkit-design"  # picks the design of a request or a WebSocket connection
DESIGN_QUERY = "design"  # the same, as a query parameter on the WebSocket URL
SCENARIO_KEY = "labkit_scenario"  # in ``metadata``: the scripted scenario the model replays
TRACES_PATH = "/labkit/traces"  # under /v1: the server's spans for one response
HISTORY_QUERY = "history"  # the trace stream's ``?history=true``: the finished responses kept, then live
LIVE_COMMENT = ": live"  # the SSE comment line between the trace stream's history and its live traces
