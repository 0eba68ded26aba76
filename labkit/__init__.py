"""labkit: a real Responses API server on a simulated inference engine.

The server speaks the Responses API over HTTP, SSE and WebSocket mode, so the
official ``openai`` SDK and other real clients use it unmodified; the engine
behind it produces real tokens at a chosen model speed.
"""

__version__ = "0.1.0"
