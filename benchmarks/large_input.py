"""Does a large request stall everyone else? ``/healthz`` latency while one 2 MiB body is served.

Starts ``labkit serve --profile local`` on loopback, polls ``/healthz`` from a thread every 10 ms
(a fresh request each time, timed on the client), and meanwhile sends one ``POST /v1/responses``
whose input is a single user message of about ``--mib`` MiB (the body stays under the server's
2 MiB limit): once **prose** (ordinary words, so about 4 characters a token) and once a **single
word** (one run of letters with no spaces, the tokenizer's worst case). It prints, per input, the
request's own time, the slowest ``/healthz`` answer while the request was in flight, and the
median one (a quiet server answers in about a millisecond).

Before the fix ``render`` tokenized and ``input_safety`` scanned such an input on the event loop,
so every ``/healthz`` waited behind it; now their CPU work runs in a worker thread when the input
is large (``labkit.server.stages.offload.OFF_LOOP_CHARS``), and tiktoken releases the GIL while it
encodes, so the loop keeps answering.

    python benchmarks/large_input.py
    python benchmarks/large_input.py --mib 1 --inputs prose
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from labkit.client.launcher import LabkitServer

HEADERS = {"Authorization": "Bearer sk-labkit-bench"}
# A 2 MiB input is past every built-in model's context window (about 430k tokens as prose): the
# bench serves a model of labkit-spark's speeds whose window holds it, since what it measures is
# the work of reading the input, not the refusal.
MODEL = "labkit-spark-wide"
MODELS = f"""[models.{MODEL}]
description = "labkit-spark's speeds, with a window that holds a 2 MiB input"
decode_tps = 1000
prefill_tps = 50000
context_window = 2000000
max_output_tokens = 32768
"""
PROSE = "the quick brown fox jumps over the lazy dog while the agent reads every file twice "


def text_of(kind: str, chars: int) -> str:
    if kind == "prose":
        return PROSE * (chars // len(PROSE))
    return "a" * chars


class Poller:
    """``/healthz`` every ``every_s``; each answer's latency, stamped with when it was asked."""

    def __init__(self, url: str, every_s: float = 0.01) -> None:
        self.url, self.every_s = url, every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                asked = time.perf_counter()
                client.get(self.url).raise_for_status()
                self.samples.append((asked, time.perf_counter() - asked))
                self._stop.wait(self.every_s)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def during(self, start: float, end: float) -> list[float]:
        """Latencies of the polls in flight at some point in [start, end]."""
        return [latency for asked, latency in self.samples if asked <= end and asked + latency >= start]


def measure(base_url: str, kind: str, mib: float) -> dict[str, float]:
    text = text_of(kind, int(mib * 1024 * 1024) - 4096)  # room for the rest of the body
    body = {"model": MODEL, "input": text, "max_output_tokens": 16, "store": False}
    health = base_url.removesuffix("/v1") + "/healthz"
    with Poller(health) as poller, httpx.Client(timeout=300, headers=HEADERS) as client:
        time.sleep(0.3)  # a few quiet polls first
        start = time.perf_counter()
        reply = client.post(f"{base_url}/responses", json=body)
        end = time.perf_counter()
        reply.raise_for_status()
        time.sleep(0.1)
    during = poller.during(start, end)
    return {
        "request_s": end - start,
        "healthz_max_s": max(during),
        "healthz_p50_s": statistics.median(during),
        "polls": len(during),
        "input_tokens": reply.json()["usage"]["input_tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--mib", type=float, default=2.0, help="body size in MiB (the limit is 2)")
    parser.add_argument("--inputs", default="prose,word", help="prose, word, or both")
    args = parser.parse_args()
    print("| input | input tokens | request | /healthz while it runs: slowest | median | polls |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models.toml"
        models.write_text(MODELS, encoding="utf-8")
        with LabkitServer(args=["--profile", "local", "--models", str(models)]) as server:
            run(server.base_url, args)


def run(base_url: str, args: argparse.Namespace) -> None:
    measure(base_url, "prose", 0.05)  # warm up
    for kind in args.inputs.split(","):
        m = measure(base_url, kind, args.mib)
        print(
            f"| {args.mib:g} MiB {kind} | {m['input_tokens']:,} | {m['request_s'] * 1000:,.0f} ms "
            f"| {m['healthz_max_s'] * 1000:,.0f} ms | {m['healthz_p50_s'] * 1000:.1f} ms | {m['polls']} |"
        )


if __name__ == "__main__":
    main()
