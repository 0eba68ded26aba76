"""What steering is for: the time from a user's correction to the first token that answers it,
while the agent writes a long answer, at 65 and at 1,000 tokens/s.

Starts ``labkit serve --profile production-like`` on loopback and, per speed, takes turns
between three ways to get the correction in (``labkit.client.steering``):

- **steer**: WebSocket mode, ``response.steer`` on the running response; it stops at its next
  sentence end and a successor served from the connection cache answers;
- **wait**: WebSocket mode, wait for the answer to end, then a follow-up ``response.create``
  with ``previous_response_id``;
- **resend**: stateless HTTP, abandon the stream and send the whole conversation again.

Each run is a session of ``--history-tokens`` of instructions, a question whose answer is
``--answer-tokens`` long, and the correction sent once the client has read ``--after-tokens``
of it; the clock runs from sending the correction to the first text delta that answers it. The
table gives each strategy's median over ``--repeat`` runs and the ratios of those medians, all
measured side by side in one run.

    python benchmarks/steering.py
    python benchmarks/steering.py --repeat 5 --answer-tokens 2000
    python benchmarks/steering.py --json
"""

from __future__ import annotations

import argparse
import json
import os

from labkit.client.launcher import LabkitServer
from labkit.client.steering import correction_latency, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tps", default="65,1000", help="decode speeds, comma-separated (65, 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per strategy and speed")
    parser.add_argument("--answer-tokens", type=int, default=1000, help="length of the answer corrected")
    parser.add_argument("--after-tokens", type=int, default=50, help="tokens read before the correction")
    parser.add_argument("--history-tokens", type=int, default=4000, help="the session's instructions")
    parser.add_argument("--profile", default="production-like")
    parser.add_argument("--json", action="store_true", help="print every run as JSON")
    args = parser.parse_args()
    tps = tuple(int(t) for t in args.tps.split(","))
    with LabkitServer(args=["--profile", args.profile]) as server:
        runs = correction_latency(
            server.base_url,
            tps=tps,
            repeat=args.repeat,
            answer_tokens=args.answer_tokens,
            after_tokens=args.after_tokens,
            history_tokens=args.history_tokens,
        )
    if args.json:
        print(json.dumps(runs.to_dict(orient="records")))
        return
    print(
        f"profile {args.profile}, answer {args.answer_tokens} tokens, correction after {args.after_tokens}, "
        f"{args.history_tokens} tokens of instructions, median of {args.repeat} runs; {os.cpu_count()} cores"
    )
    table = summary(runs)
    read = runs.groupby(["tps", "strategy"])["read_after"].median().unstack()
    print("\n| tokens/s | steer | wait, then create | resend over HTTP | wait / steer | resend / steer |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in table.itertuples():
        print(
            f"| {row.tps:,} | {row.steer_s * 1000:,.0f} ms | {row.wait_s * 1000:,.0f} ms "
            f"| {row.resend_s * 1000:,.0f} ms | {row.wait_over_steer:.1f}x | {row.resend_over_steer:.1f}x |"
        )
    print("\nTokens of the old answer the client read after sending the correction (median):")
    print(read.to_string())


if __name__ == "__main__":
    main()
