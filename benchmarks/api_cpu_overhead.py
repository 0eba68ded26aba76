"""The server's real API CPU per turn, by conversation size, naive next to websocket.

Starts ``labkit serve --profile local`` (every modeled delay is zero: no
hops, no network latency, no classifier cost per token) with a benchmark
model that decodes at 1,000,000 tokens/s and prefills at 10^9 tokens/s, so
inference takes microseconds. Then it runs the same synthetic agent rollout
over each design: each turn calls ``fetch``, whose output is ``--tool-tokens``
tokens, so the conversation grows by about the same ~1.1k tokens every turn
until it is past the largest target.

Per turn, the API CPU overhead is the sum of the durations of the server's
spans in the ``api`` bucket: every stage except queue, prefill and decode
(validation, hydration, input and output safety, render, routing, retain,
billing, and the zero-delay network stages). With no stage sleeping, these
durations are the server's own CPU work. A turn counts for a target when its
prompt size (the ``render`` span's ``prompt_tokens``) is among the
``--near`` nearest to the target and within 25% of it; turn 0 never
counts (it opens the connection and sends everything, in every design).
The table gives the median over those turns across ``--repeats`` rollouts
per design. The new input per turn is the same at every size, so what grows
with the target is what the server does over the history.

``flatness`` is a design's median API milliseconds at the largest size over
those at the smallest: 1.0 means a turn costs the service the same however
long the conversation is.

``client-seen`` is the design doc's definition of API overhead instead
(labkit.analysis.metrics.turns: a turn's wall time minus inference and
tools), measured on the client; it adds what no server span covers, chiefly
the client building and sending the request and reading the stream.

    python benchmarks/api_cpu_overhead.py                      # ~1k, ~10k, ~100k tokens, 5 repeats
    python benchmarks/api_cpu_overhead.py --repeats 2 --targets 1000,20000
    python benchmarks/api_cpu_overhead.py --json               # one JSON row per design and size
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labkit.analysis.metrics import turns as turn_table
from labkit.api.stages import bucket_of
from labkit.client.agent import MAX_TURNS, Rollout
from labkit.client.launcher import LabkitServer
from labkit.scenarios import synthetic

MODEL = "labkit-bench-instant"
MODELS_TOML = f"""\
[models.{MODEL}]
description = "Inference in microseconds, so a turn's time is the service's own."
decode_tps = 1000000
prefill_tps = 1000000000
"""
# Tokens a turn adds beyond the tool output and the call's arguments: two block headers
# ("assistant to=functions.fetch call_id=...", "tool call_id=...") and their markup.
TURN_MARKUP_TOKENS = 75
TOLERANCE = 0.25  # a turn counts for a target only if its prompt is within 25% of it
# Stages in the order a turn runs them; any other api stage is listed after these.
STAGE_ORDER = (
    "connect",
    "upgrade",
    "uplink",
    "auth",
    "validation",
    "hydration",
    "input_safety",
    "render",
    "routing",
    "intermediary",
    "downlink",
    "output_safety",
    "retain",
    "storage",
    "billing",
)


def turn_rows(rollout: Rollout) -> list[dict[str, Any]]:
    """Per turn: prompt tokens, api milliseconds (total and per stage), client-seen api milliseconds."""
    frame = rollout.frame()
    seen = turn_table(frame)["api"]
    rows = []
    for record in rollout.records:
        spans = rollout.spans.get(record.response_id, [])
        render = next((s for s in spans if s["stage"] == "render"), None)
        if render is None:
            continue
        stages: dict[str, float] = {}
        for span in spans:
            if bucket_of(span["stage"]) == "api":
                ms = (span["end"] - span["start"]) * 1000
                stages[span["stage"]] = stages.get(span["stage"], 0.0) + ms
        rows.append(
            {
                "turn": record.turn,
                "prompt_tokens": render["detail"]["prompt_tokens"],
                "api_ms": sum(stages.values()),
                "stages": stages,
                "client_seen_ms": float(seen.get(record.turn, math.nan)) * 1000,
            }
        )
    return rows


def near(rows: list[dict[str, Any]], target: int, count: int) -> list[dict[str, Any]]:
    """The ``count`` turns (never turn 0) whose prompt is nearest ``target``, within the tolerance."""
    candidates = [r for r in rows if r["turn"] > 0 and abs(r["prompt_tokens"] - target) <= TOLERANCE * target]
    return sorted(candidates, key=lambda r: abs(r["prompt_tokens"] - target))[:count]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(design: str, target: int, picked: list[dict[str, Any]]) -> dict[str, Any]:
    api = [r["api_ms"] for r in picked]
    q1, median, q3 = quartiles(api)
    names = {name for r in picked for name in r["stages"]}
    order = [s for s in STAGE_ORDER if s in names] + sorted(names - set(STAGE_ORDER))
    return {
        "design": design,
        "target_tokens": target,
        "turns": len(picked),
        "prompt_tokens": int(statistics.median(r["prompt_tokens"] for r in picked)),
        "api_ms_median": median,
        "api_ms_p25": q1,
        "api_ms_p75": q3,
        "client_seen_ms_median": statistics.median(r["client_seen_ms"] for r in picked),
        # Each stage's median on its own: these need not add up to the median total.
        "stage_ms_median": {s: statistics.median(r["stages"].get(s, 0.0) for r in picked) for s in order},
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    targets = sorted(int(t) for t in args.targets.split(","))
    growth = args.tool_tokens + args.output_tokens + TURN_MARKUP_TOKENS
    turns = math.ceil(max(targets) / growth) + 2
    if turns > MAX_TURNS:
        sys.exit(
            f"{turns} turns needed to reach {max(targets):,} tokens; the agent stops at {MAX_TURNS}. "
            "Raise --tool-tokens."
        )
    scenario = synthetic(
        turns=turns, output_tokens=args.output_tokens, tool_tokens=args.tool_tokens, instruction_tokens=0
    )
    collected: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    with tempfile.TemporaryDirectory(prefix="labkit-bench-") as tmp:
        models = Path(tmp) / "models.toml"
        models.write_text(MODELS_TOML)
        with LabkitServer(args=["--profile", "local", "--models", str(models)]) as server:
            warm = synthetic(turns=4, output_tokens=20, tool_tokens=500, instruction_tokens=0)
            for design in designs:  # warm both processes' code paths first
                Rollout.run(server.base_url, design, warm, model=MODEL)
            for repeat in range(args.repeats):
                for design in designs:  # interleaved, so drift over the run hits every design alike
                    started = time.perf_counter()
                    rollout = Rollout.run(server.base_url, design, scenario, model=MODEL)
                    rows = turn_rows(rollout)
                    collected[design] += [{**r, "repeat": repeat} for r in rows]
                    print(
                        f"  {design:<10} repeat {repeat + 1}/{args.repeats}: {len(rows)} turns, "
                        f"{rows[-1]['prompt_tokens']:,} prompt tokens at the end, "
                        f"{time.perf_counter() - started:.1f} s",
                        file=sys.stderr,
                    )
    results = []
    for target in targets:
        for design in designs:
            by_repeat: dict[int, list[dict[str, Any]]] = {}
            for r in collected[design]:
                by_repeat.setdefault(r["repeat"], []).append(r)
            picked = [p for rows in by_repeat.values() for p in near(rows, target, args.near)]
            if not picked:
                print(f"  no turn within {TOLERANCE:.0%} of {target:,} tokens for {design}", file=sys.stderr)
                continue
            results.append(summarize(design, target, picked))
    return results


def label(tokens: int) -> str:
    return f"~{tokens // 1000}k" if tokens >= 1000 else f"~{tokens}"


def format_tables(results: list[dict[str, Any]]) -> str:
    lines = [
        f"{'history':<9}{'design':<11}{'turns':>6}{'prompt':>10}{'api ms':>9}{'p25-p75':>15}"
        f"{'client-seen':>13}",
    ]
    for r in results:
        spread = f"{r['api_ms_p25']:.2f}-{r['api_ms_p75']:.2f}"
        lines.append(
            f"{label(r['target_tokens']):<9}{r['design']:<11}{r['turns']:>6}{r['prompt_tokens']:>10,}"
            f"{r['api_ms_median']:>9.2f}{spread:>15}{r['client_seen_ms_median']:>13.2f}"
        )
    by = {(r["design"], r["target_tokens"]): r for r in results}
    targets = sorted({r["target_tokens"] for r in results})
    if any(("naive", t) in by and ("websocket", t) in by for t in targets):
        lines += ["", f"{'history':<9}{'naive/websocket api':>21}{'client-seen':>13}"]
        for t in targets:
            naive, ws = by.get(("naive", t)), by.get(("websocket", t))
            if naive and ws:
                lines.append(
                    f"{label(t):<9}{naive['api_ms_median'] / ws['api_ms_median']:>20.1f}x"
                    f"{naive['client_seen_ms_median'] / ws['client_seen_ms_median']:>12.1f}x"
                )
    small, large = targets[0], targets[-1]
    designs = list(dict.fromkeys(r["design"] for r in results))
    # Flatness: a turn's cost at the largest history over its cost at the smallest (1.0 is flat).
    flat = [d for d in designs if (d, small) in by and (d, large) in by]
    if flat and small != large:
        lines += ["", f"{'flatness':<9}{'api ms at ' + label(large) + ' / at ' + label(small):>31}"]
        for d in flat:
            ratio = by[(d, large)]["api_ms_median"] / by[(d, small)]["api_ms_median"]
            lines.append(f"{d:<9}{ratio:>30.2f}x")
    columns = [(d, t) for d in designs for t in (small, large) if (d, t) in by]
    stages = list(dict.fromkeys(s for key in columns for s in by[key]["stage_ms_median"]))
    order = [s for s in STAGE_ORDER if s in stages] + [s for s in stages if s not in STAGE_ORDER]
    heads = "".join(f"{d[:9] + ' ' + label(t):>17}" for d, t in columns)
    lines += ["", "median ms per api stage, at the smallest and largest size", f"{'stage':<15}{heads}"]
    for stage in order:
        cells = "".join(f"{by[key]['stage_ms_median'].get(stage, 0.0):>17.3f}" for key in columns)
        lines.append(f"{stage:<15}{cells}")
    totals = "".join(f"{by[key]['api_ms_median']:>17.3f}" for key in columns)
    lines.append(f"{'total (median)':<15}{totals}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--designs", default="naive,websocket")
    parser.add_argument("--targets", default="1000,10000,100000", help="history sizes, in prompt tokens")
    parser.add_argument("--repeats", type=int, default=5, help="rollouts per design")
    parser.add_argument("--near", type=int, default=3, help="turns per rollout counted for each size")
    parser.add_argument("--tool-tokens", type=int, default=1000, help="tokens of each tool output")
    parser.add_argument("--output-tokens", type=int, default=20, help="tokens of each call's arguments")
    parser.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    args = parser.parse_args()
    results = run(args)
    print(json.dumps(results, indent=2) if args.json else format_tables(results))


if __name__ == "__main__":
    main()
