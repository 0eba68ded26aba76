"""Every checked claim of every notebook on the cost model, on laptops from 0.3x to 3x this one's CPU.

    python benchmarks/claim_margins.py [--factors 0.3 1 3] [--json margins.json]
    python benchmarks/lesson_claims.py --margins [--runs 3] [--busy] [NOTEBOOK ...]

A notebook checks each lesson that depends on a measurement with ``lab.claim``. Here each claim
has its model counterpart, one function named after the claim: the notebook's own computation
(``lab.summary``, ``lab.saving``, ``lab.growth``, ...) on the cost model's predicted rollouts of
the same designs, scenario, profile and speeds, laid out as measured frames
(``labkit.analysis.whatif.as_run``). The CPU costs are this machine's (``CpuCosts.measure``),
times each factor: 0.3 is a laptop whose CPU work takes 0.3 times as long (about three times
faster), 3 one three times slower; the client's tools scale with them, the profile's modelled
delays do not. Each claim's margin says how far it is from flipping, in its own unit (above
zero: it holds), and where the notebook asks a saving to clear three standard errors, in those
too: a prediction's standard error is the spread of its own per-turn savings, which a run's
noise only adds to. A claim that does not depend on timing (which stages ran, what a key sees)
is listed with the reason. ``lesson_claims.py --margins`` prints the same table beside the
margins read from the sentences its runs printed (``read``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from claim_counterparts import COUNTERPARTS
from claim_vocabulary import FACTORS, UNITS, Counterpart, Machine, Margin, value_of

from labkit.analysis.cpu_costs import CpuCosts


def claims_in(path: Path) -> list[str]:
    """The names a notebook's ``lab.claim`` calls give, as regular expressions: an f-string's
    fields match anything (``at {speed:,} tokens/s`` is ``at .+ tokens/s``)."""
    names = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # a cell may await at its top level
        tree = compile("".join(cell["source"]), path.name, "exec", flags=flags)
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and ast.unparse(call.func) == "lab.claim" and call.args:
                names.append(_pattern(call.args[0]))
    return names


def _pattern(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return re.escape(str(node.value))
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(str(v.value)) if isinstance(v, ast.Constant) else ".+" for v in node.values)
    raise ValueError(f"a claim named by an expression ({ast.unparse(node)}) has no name to match")


def uncovered(notebooks: Sequence[Path]) -> list[str]:
    """Claims the notebooks check with no counterpart here, and counterparts no notebook checks."""
    missing = []
    for path in notebooks:
        notebook = path.name[:2]
        patterns = claims_in(path)
        mine = [c for c in COUNTERPARTS if c.notebook == notebook]
        missing += [
            f"{path.name}: {p}" for p in patterns if not any(re.fullmatch(p, _plain(c.claim)) for c in mine)
        ]
        missing += [
            f"{path.name}: no such claim {c.claim}"
            for c in mine
            if not any(re.fullmatch(p, _plain(c.claim)) for p in patterns)
        ]
    return missing


def counterpart_of(notebook: str, name: str) -> Counterpart | None:
    """The counterpart of a claim a notebook (``"01"``) checks, by the claim's name."""
    return next((c for c in COUNTERPARTS if c.notebook == notebook and c.names(name)), None)


# ---------------------------------------------------------------- the sweep, and its report


def evidence_of(name: str, sentence: str) -> str:
    """The evidence in a claim's sentence (``labkit.analysis.claims.sentence``).

    >>> evidence_of("x", "Checked on this run: x: holds (1 s at 65, 2 s at 1,000).")
    '1 s at 65, 2 s at 1,000'
    """
    rest = sentence.removeprefix(f"Checked on this run: {name}: ")
    _, _, evidence = rest.partition(" (")
    return evidence.removesuffix(").")


def sweep(cpu: CpuCosts, factors: Sequence[float] = FACTORS) -> list[dict]:
    """Every counterpart's margin at every factor: one row per claim."""
    machines = [Machine(cpu, f) for f in factors]
    rows = []
    for c in COUNTERPARTS:
        row = {"notebook": c.notebook, "claim": c.claim, "why": c.why, "model": {}}
        for m in machines:
            if c.model is not None:
                row["model"][m.factor] = c.model(m)
        rows.append(row)
    return rows


def measured_margins(record: Sequence[dict]) -> dict[tuple[str, str], list[Margin]]:
    """Per (notebook, claim name): the margins read from each run's sentence (``--json`` records)."""
    found: dict[tuple[str, str], list[Margin]] = {}
    for run in record:
        notebook = run["notebook"][:2]
        for claim in run["claims"]:
            c = counterpart_of(notebook, claim["name"])
            margin = c.read(evidence_of(claim["name"], claim["sentence"])) if c else None
            if margin is not None:
                found.setdefault((notebook, c.claim if c else claim["name"]), []).append(margin)
    return found


def report(
    rows: Sequence[dict], measured: dict[tuple[str, str], list[Margin]] | None = None, out=sys.stdout
) -> None:
    """The sweep as a table per notebook: each claim's margin at each factor (and, given runs, the
    smallest and the median margin measured), then what the model shows for it."""
    factors = sorted({f for row in rows for f in row["model"]})
    head = "".join(f"{f'CPU x{f:g}':>22}" for f in factors) + (
        f"{'measured: least / median':>34}" if measured else ""
    )
    for notebook in sorted({row["notebook"] for row in rows}):
        print(f"\n{notebook}{'':<64}{head}", file=out)
        for row in (r for r in rows if r["notebook"] == notebook):
            cells = "".join(
                f"{row['model'][f].text():>22}" if f in row["model"] else f"{'-':>22}" for f in factors
            )
            if measured is not None:
                cells += f"{_measured_text(measured.get((notebook, row['claim']), [])):>34}"
            print(f"  {_plain(row['claim'])[:64]:<64}{cells}", file=out)
            for f in factors:
                if f in row["model"]:
                    print(f"      x{f:g}: {row['model'][f].shown}", file=out)
            if row["why"]:
                print(f"      {'no timing' if not row['model'] else 'note'}: {row['why']}", file=out)


def _measured_text(margins: Sequence[Margin]) -> str:
    numbers_ = [m.value for m in margins if m.value is not None]
    if not margins:
        return "-"
    if not numbers_:
        return f"holds in {len(margins)}"
    least = min(margins, key=value_of)
    middle = statistics.median(numbers_)
    return f"{least.text()} / {UNITS[least.unit](middle)}"


def _plain(pattern: str) -> str:
    """A counterpart's name as the notebook writes it (its pattern without the escapes)."""
    return re.sub(r"\\(.)", r"\1", pattern)


def as_json(rows: Sequence[dict]) -> list[dict]:
    return [{**row, "model": {str(f): vars(m) for f, m in row["model"].items()}} for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--factors", type=float, nargs="+", default=list(FACTORS), help="CPU factors to price at"
    )
    parser.add_argument("--json", type=argparse.FileType("w"), help="write every margin here")
    args = parser.parse_args()
    cpu = CpuCosts.measure()
    print(f"this machine's {cpu.summary()}")
    rows = sweep(cpu, args.factors)
    report(rows)
    if args.json:
        json.dump(as_json(rows), args.json, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
