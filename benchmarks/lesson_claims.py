"""How often each notebook's checked claims hold: every notebook run N times, headless, claims counted.

    python benchmarks/lesson_claims.py [--runs 10] [--busy] [--json results.json] [--cells] [NOTEBOOK ...]
    python benchmarks/lesson_claims.py --margins [--runs 3] [--busy] [--read results.json] [NOTEBOOK ...]

A notebook states its lessons in Markdown and checks each one that depends on a measurement
with ``lab.claim`` (``labkit/analysis/claims.py``), which leaves the verdict in the cell's
output. This script runs each notebook top to bottom with nbclient, as a learner's *Run All*
would (no environment variable set; the notebooks run in turn, ``--runs`` rounds), reads the
verdicts back, and prints per claim how often it held, failed, or could not be decided, with the
first sentence of a run where it did not hold. It also prints each notebook's time per run
(median and range) and, with ``--cells``, the slowest cells. ``--busy`` keeps one core of
the machine busy with another program for the whole time (what a browser drawing JupyterLab
and a learner's other programs take from a 2-core laptop). Run it with the Python of the
README's main environment (it needs the notebooks extra). It exits 1 if any claim failed.

``--margins`` adds each claim's margin (how far from flipping, ``benchmarks/claim_margins.py``):
on the cost model at CPU factors 0.3, 1 and 3 of this machine, and as measured in these runs
(the least and the median margin read from their sentences). ``--runs 0`` prices the model
only; ``--read`` takes the runs from a file an earlier ``--json`` wrote instead of running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import claim_margins
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from labkit.analysis.claims import Claim, found
from labkit.analysis.cpu_costs import CpuCosts

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Tally:
    """One claim's verdicts over the runs."""

    held: int = 0
    failed: int = 0
    undecided: int = 0
    missing: int = 0
    sentences: list[str] = field(default_factory=list)  # of the runs where it did not hold

    def add(self, claim: Claim | None) -> None:
        if claim is None:
            self.missing += 1
        elif claim.holds:
            self.held += 1
        else:
            if claim.holds is None:
                self.undecided += 1
            else:
                self.failed += 1
            self.sentences.append(claim.sentence)


def execute(path: Path, timeout: int) -> tuple[float, list[Claim], list[tuple[float, int]], str]:
    """Run one notebook: its time, its claims, each cell's (seconds, index), and an error if any."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    error = ""
    try:
        client.execute()
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1][:300]
    except TimeoutError as exc:
        error = f"a cell ran longer than {timeout} s ({exc})"
    elapsed = time.perf_counter() - start
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    return elapsed, found(outputs), _cell_seconds(notebook), error


def _cell_seconds(notebook: nbformat.NotebookNode) -> list[tuple[float, int]]:
    times = []
    for index, cell in enumerate(notebook.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if start and end:
            seconds = (datetime.fromisoformat(end[:26]) - datetime.fromisoformat(start[:26])).total_seconds()
            times.append((seconds, index))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=10, help="how many times to run each notebook")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a cell may take")
    parser.add_argument("--json", type=Path, help="write every run's verdicts and times here")
    parser.add_argument("--cells", action="store_true", help="print each notebook's five slowest cells")
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--margins", action="store_true", help="each claim's margin (model, runs)")
    parser.add_argument("--read", type=Path, help="with --margins: the runs an earlier --json wrote")
    args = parser.parse_args()
    if args.runs < (0 if args.margins else 1):
        parser.error("--runs must be at least 1 (0 only with --margins: the model alone)")
    if args.read and not args.margins:
        parser.error("--read goes with --margins")
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    if args.margins and (args.read or args.runs == 0):
        record = json.loads(args.read.read_text(encoding="utf-8")) if args.read else []
        margins(paths, record)
        return 0

    tallies: dict[str, dict[str, Tally]] = {p.name: defaultdict(Tally) for p in paths}
    times: dict[str, list[float]] = defaultdict(list)
    cells: dict[str, list[list[tuple[float, int]]]] = defaultdict(list)
    record: list[dict] = []
    errors = 0
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        errors = _rounds(args, paths, tallies, times, cells, record)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    failed = _report(tallies, times, cells if args.cells else None, args.runs)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1), encoding="utf-8")
    if args.margins:
        margins(paths, record)
    return 1 if failed or errors else 0


def margins(paths: list[Path], record: list[dict]) -> None:
    """Each claim of these notebooks: its margin on the cost model at 0.3x, 1x and 3x this machine's
    CPU, and (given runs) as the runs measured it; claims without a counterpart are named."""
    cpu = CpuCosts.measure()
    print(f"\nmargins (above zero: holds); this machine's {cpu.summary()}")
    chosen = {p.name[:2] for p in paths}
    rows = [row for row in claim_margins.sweep(cpu) if row["notebook"] in chosen]
    claim_margins.report(rows, claim_margins.measured_margins(record) if record else None)
    for gap in claim_margins.uncovered(paths):
        print(f"no counterpart: {gap}")


def _rounds(
    args: argparse.Namespace,
    paths: list[Path],
    tallies: dict[str, dict[str, Tally]],
    times: dict[str, list[float]],
    cells: dict[str, list[list[tuple[float, int]]]],
    record: list[dict],
) -> int:
    """Every notebook, ``args.runs`` rounds; the verdicts into ``tallies``; how many runs erred."""
    errors = 0
    for run in range(1, args.runs + 1):
        for path in paths:
            elapsed, claims, cell_times, error = execute(path, args.timeout)
            times[path.name].append(elapsed)
            cells[path.name].append(cell_times)
            by_name = {c.name: c for c in claims}
            names = set(tallies[path.name]) | set(by_name)
            for name in names:
                tallies[path.name][name].add(by_name.get(name))
            held = sum(bool(c.holds) for c in claims)
            print(f"[run {run}] {path.name}: {elapsed:.0f} s, {held}/{len(claims)} claims held", flush=True)
            for c in claims:
                if not c.holds:
                    print(f"[run {run}]   {c.sentence}", flush=True)
            if error:
                errors += 1
                print(f"[run {run}] {path.name}: ERROR {error}", flush=True)
            record.append(
                {"run": run, "notebook": path.name, "seconds": elapsed, "error": error,
                 "claims": [{"name": c.name, "holds": c.holds, "sentence": c.sentence} for c in claims]}
            )
    return errors


def _report(
    tallies: dict[str, dict[str, Tally]],
    times: dict[str, list[float]],
    cells: dict[str, list[list[tuple[float, int]]]] | None,
    runs: int,
) -> int:
    print(f"\nclaims over {runs} runs of each notebook (held / failed / undecided / missing)")
    not_held = 0
    for notebook, claims in tallies.items():
        seconds = times[notebook]
        print(
            f"\n{notebook}: {statistics.median(seconds):.0f} s median "
            f"({min(seconds):.0f}-{max(seconds):.0f} s over {len(seconds)} runs)"
        )
        for name, tally in sorted(claims.items()):
            print(f"  {name:<40} {tally.held:>3} / {tally.failed} / {tally.undecided} / {tally.missing}")
            if tally.held < runs:
                not_held += 1
                for sentence in tally.sentences[:2]:
                    print(f"      e.g. {sentence[:200]}")
        if cells and cells[notebook]:
            slowest = defaultdict(list)
            for run_cells in cells[notebook]:
                for seconds_, index in run_cells:
                    slowest[index].append(seconds_)
            top = sorted(slowest.items(), key=lambda kv: -statistics.median(kv[1]))[:5]
            print("  slowest cells (median s): " + ", ".join(
                f"[{i}] {statistics.median(s):.1f}" for i, s in top))
    print(f"\n{not_held} claim(s) did not hold in every run")
    return not_held


if __name__ == "__main__":
    sys.exit(main())
