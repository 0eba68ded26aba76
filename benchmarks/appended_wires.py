"""The appended design over its two wires, back to back, beside ``websocket``.

- ``appended``: the official SDK's beta connection (``client.beta.responses.connect()``), a
  ``response.inject`` of the tool outputs at each call;
- ``appended+prototype_wire``: a raw WebSocket client on labkit's reconstruction of the
  prototype's ``response.done`` / ``response.append``.

Both run the same plan on the server. Starts ``labkit serve --profile production-like`` on
loopback, runs one short warm-up rollout per design, then, per speed, ``--repeat`` rounds in
which the designs take turns turn by turn (``take_turns``: whatever else the machine does falls
on all alike). Prints, per design, the medians over the rounds of end to end, mean TTFT and the
client's building of a turn's request; then, per round, the turn-by-turn saving of one design
against another (the median over turns 1 to the last, tool runs left out, ± one standard error).

    python benchmarks/appended_wires.py
    python benchmarks/appended_wires.py --tps 65,1000,4000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics

import pandas as pd

from labkit.analysis.compare import warm_up
from labkit.analysis.metrics import end_to_end, turns
from labkit.analysis.paired import saving
from labkit.client.agent import take_turns
from labkit.client.launcher import LabkitServer
from labkit.engine.catalogue import load_catalogue
from labkit.scenarios import DEFAULT_SCENARIO

DESIGNS = ("websocket", "appended", "appended+prototype_wire")
PAIRS = (
    ("appended+prototype_wire", "appended"),
    ("websocket", "appended"),
    ("websocket", "appended+prototype_wire"),
)


def build_ms(frame: pd.DataFrame) -> float:
    """The client's building of a request, median over the turns after the first (ms)."""
    built = frame[(frame["stage"] == "build") & (frame["turn"] > 0)]["duration"]
    return float(built.median() * 1000) if len(built) else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tps", default="1000", help="decode speeds, comma-separated (65, 1000, 4000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per speed")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    parser.add_argument("--profile", default="production-like")
    args = parser.parse_args()
    models = {round(m.decode_tps): m.name for m in load_catalogue().models.values()}
    speeds = [int(t) for t in args.tps.split(",")]
    unknown = [s for s in speeds if s not in models]
    if unknown:
        parser.error(f"no labkit model decodes at {unknown[0]} tokens/s; choose from {sorted(models)}")
    with LabkitServer(args=["--profile", args.profile]) as server:
        warm_up(server.base_url, DESIGNS)
        for tps in speeds:
            frames: dict[str, list[pd.DataFrame]] = {d: [] for d in DESIGNS}
            for _ in range(args.repeat):
                *_, finished = take_turns(server.base_url, DESIGNS, args.scenario, model=models[tps])
                for design, rollout in finished.items():
                    frames[design].append(rollout.frame())
            report(tps, frames, args)


def report(tps: int, frames: dict[str, list[pd.DataFrame]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.scenario} at {tps} tokens/s, profile {args.profile}, {args.repeat} rounds, "
        f"{os.cpu_count()} cores; medians over the rounds"
    )
    print(f"{'design':<26}{'end to end':>12}{'mean TTFT':>11}{'build a turn':>14}")
    for design, runs in frames.items():
        e2e = statistics.median(end_to_end(f) for f in runs)
        ttft = statistics.median(turns(f)["ttft"].mean() for f in runs)
        build = statistics.median(build_ms(f) for f in runs)
        print(f"{design:<26}{e2e:>10.2f} s{ttft * 1000:>8.0f} ms{build:>11.1f} ms")
    print("\nturn by turn, the second design's saving against the first (± one standard error), per round")
    for before, after in PAIRS:
        savings = [saving(b, a, column="wall") for b, a in zip(frames[before], frames[after], strict=True)]
        each = ", ".join(f"{s.ms:+.1f} ± {s.noise_ms:.1f} ms ({s.shown()})" for s in savings)
        print(f"{after} vs {before}: {each}")


if __name__ == "__main__":
    main()
