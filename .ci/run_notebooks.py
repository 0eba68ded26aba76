"""Run every notebook top to bottom, headless, as a learner's "Run All" would; fail on any error
or on a notebook slower than the limit. Run it with the Python of the environment the README's
main command builds (it needs the notebooks extra).

    python .ci/run_notebooks.py [--limit SECONDS] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    """One notebook's run: whether it passed, its time, why not, and everything it printed."""

    ok: bool
    seconds: float
    why: str
    text: str

    def line(self, label: str) -> str:
        return f"{label}: {self.seconds:.1f} s {'ok' if self.ok else 'FAILED: ' + self.why}"


def run(path: Path, limit: float, env: dict[str, str] | None = None) -> Run:
    """Run ``path`` top to bottom in a new kernel, with ``env`` as its environment if given:
    ``run(path, 90).line("01")`` is, say, ``"01: 41.2 s ok"``."""
    notebook = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": str(path.parent)}}
    client = NotebookClient(notebook, timeout=int(limit), kernel_name="python3", resources=where)
    start = time.perf_counter()
    try:
        client.execute(**({"env": env} if env is not None else {}))
    except CellExecutionError as exc:
        # The error's own name and first line (the exception's text ends in a traceback's links).
        first_line = (exc.evalue or "").strip().splitlines()[:1]
        why = f"{exc.ename}: {''.join(first_line)}"[:300]
        return Run(False, time.perf_counter() - start, why, printed(notebook))
    except TimeoutError as exc:
        why = f"a cell ran longer than {limit:g} s ({exc})"
        return Run(False, time.perf_counter() - start, why, printed(notebook))
    elapsed = time.perf_counter() - start
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    if errors:
        return Run(False, elapsed, f"{errors[0]['ename']}: {errors[0]['evalue']}", printed(notebook))
    if elapsed > limit:
        return Run(False, elapsed, f"took {elapsed:.0f} s, over the {limit:g} s limit", printed(notebook))
    return Run(True, elapsed, "", printed(notebook))


def printed(notebook: nbformat.NotebookNode) -> str:
    """Every text a notebook's code cells output (streams, and the plain text of results)."""
    return "\n".join(
        output.get("text", "") or output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--limit", type=float, default=90.0, help="seconds a notebook may take")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    failed = 0
    for path in paths:
        result = run(path, args.limit)
        print(f"[notebooks] {result.line(path.name)}", flush=True)
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
