"""A recording proxy: forwards ``/v1/*`` to a Responses API server and writes a replay transcript.

Every ``POST /v1/responses`` is recorded as one ``{"request": body, "response": response}`` pair,
the response being the JSON answer or, for a stream, the response of its terminal event
(``response.completed``, ``response.incomplete`` or ``response.failed``). The transcript (the
format ``labkit replay`` reads, see ``labkit.scenarios.transcript``) is rewritten after every pair.
Requests are forwarded unchanged, so the client sees the server's own answers; HTTP only (a
client in WebSocket mode would not be recorded).

    python tools/record_transcript.py --upstream http://127.0.0.1:8765 --port 8766 --out t.json
    # then point the client at http://127.0.0.1:8766/v1
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


def build_app(upstream: str, out: Path) -> Starlette:
    pairs: list[dict[str, Any]] = []
    client = httpx.AsyncClient(base_url=upstream, timeout=None)

    def record(request: dict[str, Any], response: dict[str, Any] | None) -> None:
        if response is not None:
            pairs.append({"request": request, "response": response})
            out.write_text(json.dumps(pairs, indent=1) + "\n")

    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        upstream_request = client.build_request(
            request.method, request.url.path, params=request.query_params, headers=headers, content=body
        )
        reply = await client.send(upstream_request, stream=True)
        recording = request.method == "POST" and request.url.path.rstrip("/") == "/v1/responses"
        sent = json.loads(body) if recording and body else None
        kind = reply.headers.get("content-type", "")
        dropped = HOP_HEADERS | {"content-encoding"}  # httpx has decoded the body already
        passed = {k: v for k, v in reply.headers.items() if k.lower() not in dropped}
        if "text/event-stream" not in kind:
            content = await reply.aread()
            await reply.aclose()
            if sent is not None and reply.status_code == 200:
                record(sent, json.loads(content))
            return Response(content, status_code=reply.status_code, headers=passed)

        async def relay() -> AsyncIterator[bytes]:
            final = None
            try:
                async for line in reply.aiter_lines():
                    if line.startswith("data:") and sent is not None:
                        event = json.loads(line[5:])
                        if event.get("type") in TERMINAL:
                            final = event["response"]
                    yield (line + "\n").encode()
            finally:
                await reply.aclose()
                if sent is not None:
                    record(sent, final)

        return StreamingResponse(relay(), status_code=reply.status_code, headers=passed)

    methods = ["GET", "POST", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the server, e.g. http://127.0.0.1:8765")
    parser.add_argument("--port", type=int, default=8766, help="port to listen on (127.0.0.1)")
    parser.add_argument("--out", type=Path, required=True, help="the transcript file to write")
    args = parser.parse_args()
    uvicorn.run(build_app(args.upstream, args.out), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
