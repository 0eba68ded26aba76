"""Run every notebook top to bottom, headless, as a learner's "Run All" would; fail on any error
or on a notebook slower than the limit. Run it with the Python of the environment the README's
main command builds (it needs the notebooks extra).

    python .ci/run_notebooks.py [--limit SECONDS] [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]


def run(path: Path, limit: float) -> tuple[bool, float, str]:
    notebook = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": str(path.parent)}}
    client = NotebookClient(notebook, timeout=int(limit), kernel_name="python3", resources=where)
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        return False, time.perf_counter() - start, str(exc).splitlines()[-1][:300]
    except TimeoutError as exc:
        return False, time.perf_counter() - start, f"a cell ran longer than {limit:g} s ({exc})"
    elapsed = time.perf_counter() - start
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    if errors:
        return False, elapsed, f"{errors[0]['ename']}: {errors[0]['evalue']}"
    if elapsed > limit:
        return False, elapsed, f"took {elapsed:.0f} s, over the {limit:g} s limit"
    return True, elapsed, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--limit", type=float, default=90.0, help="seconds a notebook may take")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    failed = 0
    for path in paths:
        ok, elapsed, why = run(path, args.limit)
        print(f"[notebooks] {path.name}: {elapsed:.1f} s {'ok' if ok else 'FAILED: ' + why}", flush=True)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
