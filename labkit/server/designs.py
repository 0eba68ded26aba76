"""The four designs: one pipeline, four configurations.

| design    | client                                   | what the server does per turn                     |
|-----------|------------------------------------------|---------------------------------------------------|
| naive     | HTTP, whole history, ``store=false``     | every stage over the whole history, every hop,    |
|           |                                          | blocking billing                                  |
| sprint    | same as naive                            | rendered tokens cached by conversation prefix,    |
|           |                                          | model config cached, intermediary hop removed,    |
|           |                                          | faster classifiers                                |
| websocket | one socket, ``previous_response_id`` +   | sprint + the connection cache: only new input is  |
|           | only new items                           | checked and rendered, routing reused, billing     |
|           |                                          | overlapped with the next request                  |
| appended  | one socket, one long response,           | pre-inference once, sampling pauses at each tool  |
|           | ``response.append`` per tool result      | call, post-inference once at the end              |

Selected per request or connection with the ``x-labkit-design`` header (or the
``design`` query parameter on the WebSocket URL). With none, HTTP takes
``sprint`` and WebSocket mode ``websocket``, as production did after the launch.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.api.errors import invalid_request

DESIGN_HEADER = "x-labkit-design"


@dataclass(frozen=True)
class Design:
    name: str
    render_cache: bool  # rendered tokens kept in memory, keyed by the conversation prefix
    model_config_cache: bool  # model configuration kept in memory after the first lookup
    intermediary_hop: bool  # inference reached through an intermediary service
    fast_classifiers: bool  # the sprint's faster safety stack
    connection_cache: bool  # the previous response's state kept on the connection
    async_billing: bool  # billing overlapped with the next request instead of blocking
    appended: bool = False  # one long response resumed by response.append


NAIVE = Design("naive", False, False, True, False, False, False)
SPRINT = Design("sprint", True, True, False, True, False, False)
WEBSOCKET = Design("websocket", True, True, False, True, True, True)
APPENDED = Design("appended", True, True, False, True, True, True, appended=True)

DESIGNS = {d.name: d for d in (NAIVE, SPRINT, WEBSOCKET, APPENDED)}
DEFAULT_HTTP = SPRINT
DEFAULT_WEBSOCKET = WEBSOCKET


def select_design(name: str | None, default: Design) -> Design:
    """The design a request asked for, or the transport's default; unknown names are a 400."""
    if not name:
        return default
    try:
        return DESIGNS[name]
    except KeyError:
        raise invalid_request(
            f"Unknown labkit design '{name}'. Known designs: {', '.join(DESIGNS)}.",
            param=DESIGN_HEADER,
            code="invalid_value",
        ) from None
