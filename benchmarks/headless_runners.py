"""Each notebook's time under the ecosystem's headless runners against its time in JupyterLab.

    python benchmarks/headless_runners.py [--python .venv/bin/python] [NOTEBOOK ...]

Per notebook, side by side in one run: "Run All" in JupyterLab, driven in headless Chromium
(from "Run All" to the last cell done; needs the ``playwright`` package and a Chromium, see
``benchmarks/front_ends.py``), then ``jupyter nbconvert --execute``, ``papermill`` and
``jupyter execute`` (nbclient), each timed as the whole command and over its cells (first
cell's start to last cell's end, as the runner recorded them: the span "Run All" is timed
over, without the runner's start-up, kernel start and writing). No environment variable is
set: a live plot learns by itself that nothing draws it. The ratio is the cells' time over
JupyterLab's; a runner that is not installed is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder (benchmarks/) is the first place Python imports from.
import front_ends as front

ROOT = Path(__file__).resolve().parents[1]


def runners(python: str, notebook: Path, out: Path) -> dict[str, list[str]]:
    """The command of each headless runner for ``notebook``, writing into ``out``."""
    executed = str(out / notebook.name)
    return {
        "nbconvert": [
            python,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            str(notebook),
            "--output",
            executed,
        ],
        "papermill": [python, "-m", "papermill", "--cwd", str(notebook.parent), str(notebook), executed],
        "nbclient": [python, "-m", "jupyter", "execute", str(notebook), f"--output={executed}"],
    }


def cells_seconds(executed: Path) -> float:
    """From the first cell's start to the last cell's end, as the runner recorded them in the
    executed notebook (``metadata.execution``): the span JupyterLab's "Run All" is timed over,
    without the runner's own start-up, kernel start and writing."""
    import json
    from datetime import datetime

    def at(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    timing = [c["metadata"].get("execution", {}) for c in cells if c["cell_type"] == "code"]
    starts = [at(t["iopub.execute_input"]) for t in timing if "iopub.execute_input" in t]
    ends = [at(t["shell.execute_reply"]) for t in timing if "shell.execute_reply" in t]
    return (max(ends) - min(starts)).total_seconds()


def has_module(python: str, module: str) -> bool:
    check = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", check], capture_output=True).returncode == 0


def time_command(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[2:4]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def in_jupyterlab(python: str, notebooks: list[Path], out: Path) -> dict[str, float]:
    """Seconds from "Run All" to done in JupyterLab, per notebook (empty without playwright)."""
    if importlib.util.find_spec("playwright") is None:
        print("(no playwright here: JupyterLab is not timed)")
        return {}
    from playwright.sync_api import sync_playwright

    seconds = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=front.chromium(), args=front.CHROMIUM_ARGS)
        port = front.free_port()
        server = front.start_front_end(python, "lab", port, out / "lab.log")
        try:
            for notebook in notebooks:
                report = front.check_front_end(browser, "lab", port, notebook, out, limit=300)
                if not report["ok"]:
                    raise SystemExit(f"{notebook.name} failed in JupyterLab: {report}")
                seconds[notebook.name] = report["seconds"]
        finally:
            server.terminate()
            server.wait(timeout=20)
            browser.close()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--python", type=front.python_path, default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args()
    notebooks = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    out = Path(tempfile.mkdtemp(prefix="labkit-runners-"))
    lab = in_jupyterlab(args.python, notebooks, out)
    names = [
        name
        for name in ("nbconvert", "papermill", "nbclient")
        if name != "papermill" or has_module(args.python, "papermill")
    ]
    print("| notebook | JupyterLab | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for notebook in notebooks:
        commands = runners(args.python, notebook, out)
        cells = []
        for name in names:
            seconds = time_command(commands[name], notebook.parent)
            span = cells_seconds(out / notebook.name)
            ratio = f", {span / lab[notebook.name]:.2f}x" if notebook.name in lab else ""
            cells.append(f"{seconds:.1f} s ({span:.1f} s in cells{ratio})")
        reference = f"{lab[notebook.name]:.1f} s" if notebook.name in lab else "—"
        print(f"| `{notebook.stem}` | {reference} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
