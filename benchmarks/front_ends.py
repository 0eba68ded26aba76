"""Every notebook runs and draws its figures in the front ends a room uses, checked in a real
headless Chromium: Notebook 7's own UI (``jupyter notebook``) or JupyterLab opens the notebook,
runs all cells, and the page is read: cells run, error outputs, plotly figures drawn, with
screenshots; ``seconds`` is the run, from "Run All" to the last cell done.

    python benchmarks/front_ends.py [--python .venv/bin/python] [--front-end notebook7|lab|all]
                                    [--out DIR] [NOTEBOOK ...]

``benchmarks/headless_runners.py`` times JupyterLab with this module's driver, and
``benchmarks/executed_copies.py`` (the executed HTML copies, offline) borrows its browser.

This script needs only ``playwright`` (the Python package; its browser download is
never used: it drives the system Chromium, ``$CHROMIUM`` or /usr/bin/chromium).
The project's Python (``--python``) needs the notebooks extra and ``notebook>=7``.
Exit status 0 when every notebook passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# ---------------------------------------------------------------- page code (Notebook 7)

JS_READY = """() => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return false;
  const nb = app.shell.currentWidget;
  if (!nb || !nb.sessionContext || !nb.sessionContext.isReady) return false;
  const k = nb.sessionContext.session && nb.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && nb.content.widgets.length > 0;
}"""

JS_RUN_ALL = """() => {
  window.__done = false;
  Promise.resolve(window.jupyterapp.commands.execute('notebook:run-all-cells'))
    .finally(() => { window.__done = true; });
  return true;
}"""

JS_FINISHED = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const k = nb.sessionContext.session && nb.sessionContext.session.kernel;
  const running = Array.from(nb.content.node.querySelectorAll('.jp-InputArea-prompt'))
    .some(e => e.textContent.includes('*'));
  return window.__done && !running && !!k && k.status === 'idle';
}"""

JS_REPORT = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets
    .filter(c => c.model.type === 'code' && c.model.sharedModel.getSource().trim());
  const errors = [];
  for (const c of cells)
    for (const o of c.model.outputs.toJSON())
      if (o.output_type === 'error') errors.push(`${o.ename}: ${o.evalue}`.slice(0, 300));
  const node = nb.content.node;
  const text = node.innerText;
  const drawn = Array.from(node.querySelectorAll('.js-plotly-plot'))
    .filter(p => p.querySelector('.main-svg'));
  return {
    code_cells: cells.length,
    cells_run: cells.filter(c => c.model.executionCount).length,
    errors,
    widget_errors: ['Error displaying widget', 'Failed to load model class']
      .filter(t => text.includes(t)),
    plots: drawn.length,
    // a static figure is drawn by plotly's own renderer; the rest are live widgets
    static_plots: drawn.filter(p => p.closest('.jp-RenderedPlotly')).length,
  };
}"""

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        sys.exit("front_ends: no Chromium found; install Debian's chromium or set CHROMIUM")
    return path


# The front ends: the server command, the setting that exposes the app to page code, the page.
FRONT_ENDS = {
    "notebook7": ("notebook", "--JupyterNotebookApp.expose_app_in_browser=True", "notebooks"),
    "lab": ("lab", "--LabApp.expose_app_in_browser=True", "lab/tree"),
}


def python_path(given: str) -> str:
    """``--python`` as the front end's folder (notebooks/) sees it: a path is made absolute, a bare
    command name (found on PATH) is kept."""
    return str(Path(given).absolute()) if os.sep in given or "/" in given else given


def notebooks_to_check(given: list[Path], program: str) -> list[Path] | None:
    """The notebooks named, or every one in notebooks/; None (after one line on stderr) when a
    named one does not exist."""
    notebooks = [p.resolve() for p in given] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        print(f"{program}: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return None
    return notebooks


def start_front_end(python: str, kind: str, port: int, log: Path) -> subprocess.Popen:
    """``jupyter notebook`` or ``jupyter lab`` on loopback, no token, serving notebooks/."""
    app, expose, _ = FRONT_ENDS[kind]
    # Autosave off (it would write a run's outputs into notebooks/ after two minutes): a settings
    # folder of the run's own ($JUPYTERLAB_SETTINGS_DIR, which both front ends read).
    settings = log.parent / f"{kind}-settings"
    plugin = settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text(json.dumps({"autosave": False}))
    cmd = [
        python, "-m", "jupyter", app, "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        "--allow-root", "--IdentityProvider.token=", "--ServerApp.password=",
        expose, f"--ServerApp.root_dir={ROOT / 'notebooks'}",
    ]
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings)}
    process = subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT / "notebooks", env=env
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2).read()
            return process
        except OSError:
            time.sleep(0.5)
    process.terminate()
    sys.exit(f"front_ends: jupyter {app} did not start; see {log}")


try:
    from playwright.sync_api import Error as PlaywrightError
except ImportError:  # main() says what to install
    PlaywrightError = Exception


def check_front_end(browser, kind: str, port: int, notebook: Path, out: Path, limit: float) -> dict:
    """Open the notebook in the front end, run all cells, read the page; ``seconds``: the run."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())  # offline
    reset = "?reset" if kind == "lab" else ""  # JupyterLab would reopen the last session's tabs
    page.goto(f"http://127.0.0.1:{port}/{FRONT_ENDS[kind][2]}/{notebook.name}{reset}")
    page.wait_for_function(JS_READY, timeout=120_000, polling=250)
    started = time.monotonic()
    page.evaluate(JS_RUN_ALL)
    page.wait_for_function(JS_FINISHED, timeout=limit * 1000, polling=250)
    page.wait_for_timeout(1500)  # the last figure's redraw
    report = page.evaluate(JS_REPORT)
    report["seconds"] = round(time.monotonic() - started, 1)
    shot = out / f"{kind}-{notebook.stem}.png"
    page.screenshot(path=str(shot))
    report["screenshot"] = str(shot)
    plots = page.locator(".js-plotly-plot")
    for i in range(min(plots.count(), 2)):  # the notebook scrolls inside the page: one shot per plot
        with contextlib.suppress(PlaywrightError):  # not laid out by a windowed notebook: still counted
            plots.nth(i).screenshot(path=str(out / f"{kind}-{notebook.stem}-plot{i + 1}.png"), timeout=5000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    page.close()
    report["ok"] = (
        not report["errors"]
        and not report["widget_errors"]
        and report["cells_run"] == report["code_cells"]
        and (report["plots"] > 0 or _has_no_figures(notebook))
    )
    return report


def _has_no_figures(notebook: Path) -> bool:
    source = notebook.read_text(encoding="utf-8")
    return "LivePlot" not in source and "lab.show(" not in source and "WhatIfLab" not in source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--python", type=python_path, default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--front-end", choices=[*FRONT_ENDS, "all"], default="all")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "labkit-front-ends")
    parser.add_argument("--limit", type=float, default=180.0, help="seconds one notebook may take")
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("front_ends: needs the playwright package (pip install playwright)", file=sys.stderr)
        return 2
    notebooks = notebooks_to_check(args.notebooks, "front_ends")
    if notebooks is None:
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        for kind in FRONT_ENDS:
            if args.front_end not in (kind, "all"):
                continue
            port = free_port()
            server = start_front_end(args.python, kind, port, args.out / f"{kind}.log")
            try:
                for notebook in notebooks:
                    report = check_front_end(browser, kind, port, notebook, args.out, args.limit)
                    failed += not report["ok"]
                    print(f"[{kind}] {notebook.name}: {json.dumps(report)}", flush=True)
            finally:
                server.terminate()
                server.wait(timeout=20)
        browser.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
