"""Decode pacing as a client sees it, at each model's speed.

Starts ``labkit serve`` on loopback, asks each model for an answer of
``--tokens`` output tokens over SSE, and compares the rate the client sees
with the model's configured rate. The rate is the tokens that arrived after
the first text delta over the time from the first to the last delta.

The client is a plain ``httpx`` SSE reader that only timestamps frames: a
heavier client (the SDK builds a typed object per event) can fall behind at
the start and catch up later, which would measure the client, not the server.

    python benchmarks/decode_pacing.py                 # 4,000 tokens at 65, 1,000, 4,000 tokens/s
    python benchmarks/decode_pacing.py --models labkit-spark --tokens 2000
"""

from __future__ import annotations

import argparse
import json
import time

import httpx

from labkit.api.event_types import OUTPUT_TEXT_DELTA, TERMINAL_EVENT
from labkit.client.launcher import LabkitServer
from labkit.engine.catalogue import load_catalogue
from labkit.text.tokenizer import encode_text


def measure(base_url: str, model: str, tokens: int) -> dict[str, float]:
    """Stream one answer; timestamp each text delta as its frame arrives."""
    body = {
        "model": model,
        "input": f"Write {tokens} tokens.",
        "max_output_tokens": tokens,
        "stream": True,
        "store": False,
    }
    arrivals: list[tuple[float, str]] = []
    output_tokens = 0
    with httpx.stream("POST", f"{base_url}/responses", json=body, timeout=None) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            stamp = time.perf_counter()
            event = json.loads(line[len("data: ") :])
            if event["type"] == OUTPUT_TEXT_DELTA:
                arrivals.append((stamp, event["delta"]))
            elif event["type"] in (TERMINAL_EVENT["completed"], TERMINAL_EVENT["incomplete"]):
                output_tokens = event["response"]["usage"]["output_tokens"]
    (first, first_delta), (last, _) = arrivals[0], arrivals[-1]
    first_tokens = len(encode_text(first_delta))
    return {
        "output_tokens": output_tokens,
        "deltas": len(arrivals),
        "seconds": last - first,
        "rate": (output_tokens - first_tokens) / (last - first),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--models", default="labkit-classic,labkit-spark,labkit-burst")
    parser.add_argument("--tokens", type=int, default=4000)
    args = parser.parse_args()
    catalogue = load_catalogue()
    encode_text("warm up the tokenizer")
    print(f"{'model':<16}{'configured':>12}{'measured':>12}{'error':>9}{'tokens':>8}{'deltas':>8}")
    with LabkitServer() as server:
        measure(server.base_url, "labkit-burst", 200)  # warm both processes' code paths first
        for name in args.models.split(","):
            configured = catalogue.resolve(name).decode_tps
            m = measure(server.base_url, name, args.tokens)
            error = m["rate"] / configured - 1
            print(
                f"{name:<16}{configured:>12,.0f}{m['rate']:>12,.1f}{error:>+9.2%}"
                f"{m['output_tokens']:>8}{m['deltas']:>8}"
            )


if __name__ == "__main__":
    main()
