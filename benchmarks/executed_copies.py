"""Each notebook's executed HTML copy is whole offline: its size, its copies of plotly.js, and
every figure and diagram drawn in Chromium with the network refused.

    python benchmarks/executed_copies.py [--python .venv/bin/python]
                                         [--runner nbconvert|papermill|nbclient] [--out DIR] [NOTEBOOK ...]

Per notebook, as docs/measuring.md's "Executed copies" says and with no environment variable: the
notebook is executed by a headless runner (by default ``jupyter nbconvert --to notebook
--execute``, what ``--to html --execute`` runs before it exports; or papermill, or ``jupyter
execute``, which is nbclient; the commands are ``benchmarks/headless_runners.py``'s) and the
executed notebook is exported to HTML (``--to html``, nbconvert's lab template). The page is
opened from disk in Chromium with every request for anything but the file itself refused,
and read:

- ``MB``: the HTML file's size (limit: ``LIMIT_MB``);
- ``plotly.js``: the copies of plotly.js in the file, the static figures' and any left in a
  plotly widget's state (at most one);
- ``figures``: plotly plots drawn in the page / figures in the executed notebook (its outputs
  of plotly's MIME type: a static figure each);
- ``diagrams``: diagram pictures displayed / diagrams in the notebook (picture attachments and
  ``mermaid`` fences of its Markdown cells);
- ``widgets``: widget models stored in the executed notebook, and how many are plotly figures
  (none: each would carry plotly's bundle);
- ``refused``: requests the page made elsewhere (the template's script tags: require.js,
  MathJax, the widget renderer), none of which a figure or a diagram needs.

The script needs only ``playwright`` (the Python package, its browser download never used: it
drives the system Chromium, ``$CHROMIUM`` or /usr/bin/chromium); the project's Python
(``--python``) needs the notebooks extra. Exit status 0 when every notebook passed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

# Run as a script, this file's folder (benchmarks/) is the first place Python imports from.
from front_ends import CHROMIUM_ARGS, chromium, notebooks_to_check, python_path
from headless_runners import runners

ROOT = Path(__file__).resolve().parents[1]

LIMIT_MB = 8.0
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# A sentence plotly.js holds once, in its own file and in plotly's widget bundle alike: one per copy.
PLOTLY_JS_MARK = "No DOM element with id"
PICTURE = re.compile(r"!\[[^\]]*\]\(attachment:[^)]+\)")
MERMAID_FENCE = re.compile(r"^\s*```+\s*mermaid", re.M)

# Read in the page: plots that plotly drew, and the pictures of Markdown cells (diagrams) that
# loaded, whether attachments or Mermaid drawn by the template's script.
JS_DRAWN = """() => {
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'))
    .filter(p => p.querySelector('.main-svg'));
  const pictures = Array.from(document.querySelectorAll('.jp-MarkdownCell img'))
    .filter(img => img.complete && img.naturalWidth > 0);
  const mermaid = document.querySelectorAll('.jp-RenderedMermaid svg, .jp-RenderedMermaid img');
  return {plots: plots.length, diagrams: pictures.length + mermaid.length};
}"""


def expected(source: Path, executed: Path) -> dict[str, int]:
    """What the page should show: the executed notebook's figures, the source's diagrams."""
    markdown = [
        "".join(cell["source"])
        for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]
        if cell["cell_type"] == "markdown"
    ]
    cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    outputs = [output for cell in cells for output in cell.get("outputs", [])]
    return {
        "figures": sum(PLOTLY_MIME in output.get("data", {}) for output in outputs),
        "diagrams": sum(len(PICTURE.findall(text)) + len(MERMAID_FENCE.findall(text)) for text in markdown),
    }


def widgets(executed: Path) -> dict[str, int]:
    """Widget models the executed notebook stores, and those that are plotly figures."""
    metadata = json.loads(executed.read_text(encoding="utf-8"))["metadata"]
    state = metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    plotly = sum(PLOTLY_JS_MARK in json.dumps(model) for model in state.values())
    return {"models": len(state), "plotly": plotly}


def run(command: list[str], cwd: Path, limit: float) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{' '.join(command[2:4])}: still running after {limit:.0f} s") from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["failed"]
        raise RuntimeError(f"{' '.join(command[2:4])}: {tail[0]}")


def export(python: str, runner: str, notebook: Path, out: Path, limit: float) -> tuple[Path, Path, float]:
    """The notebook executed by ``runner``, its HTML copy, and the seconds both took."""
    started = time.monotonic()
    run(runners(python, notebook, out)[runner], notebook.parent, limit)
    executed = out / notebook.name
    run(
        [python, "-m", "jupyter", "nbconvert", "--to", "html", str(executed), "--output-dir", str(out)],
        out,
        limit,
    )
    return executed, out / f"{notebook.stem}.html", time.monotonic() - started


def open_offline(browser, html: Path, want: dict[str, int], shot: Path) -> dict:
    """Open the file with every other request refused; wait (up to 20 s) for everything to draw."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    refused: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)[:200]))

    def route(request_route) -> None:
        if request_route.request.url == html.as_uri():
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    page.goto(html.as_uri(), wait_until="load")
    deadline = time.monotonic() + 20
    drawn = page.evaluate(JS_DRAWN)
    while time.monotonic() < deadline and (
        drawn["plots"] < want["figures"] or drawn["diagrams"] < want["diagrams"]
    ):
        page.wait_for_timeout(250)
        drawn = page.evaluate(JS_DRAWN)
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    hosts = sorted({urlsplit(url).netloc or urlsplit(url).scheme for url in refused})
    return {**drawn, "refused": len(refused), "hosts": hosts, "page_errors": errors}


def check(browser, python: str, notebook: Path, out: Path, limit: float, runner: str = "nbconvert") -> dict:
    try:
        executed, html, seconds = export(python, runner, notebook, out, limit)
    except RuntimeError as e:
        return {"notebook": notebook.name, "ok": False, "why": str(e)}
    text = html.read_text(encoding="utf-8")
    want = expected(notebook, executed)
    page = open_offline(browser, html, want, out / f"{notebook.stem}.png")
    report = {
        "notebook": notebook.name,
        "mb": round(html.stat().st_size / 1e6, 2),
        "plotly_js": text.count(PLOTLY_JS_MARK),
        "figures": f"{page['plots']}/{want['figures']}",
        "diagrams": f"{page['diagrams']}/{want['diagrams']}",
        "widgets": widgets(executed),
        "refused": page["refused"],
        "refused_hosts": page["hosts"],
        "page_errors": page["page_errors"],
        "seconds": round(seconds, 1),
    }
    report["ok"] = (
        report["mb"] < LIMIT_MB
        and report["plotly_js"] <= 1
        and page["plots"] == want["figures"]
        and page["diagrams"] == want["diagrams"]
        and report["widgets"]["plotly"] == 0
    )
    return report


def table(reports: list[dict]) -> str:
    lines = [
        "| notebook | MB | plotly.js | figures | diagrams | widget models (plotly) | refused | ok |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in reports:
        if "why" in r:
            lines.append(f"| {r['notebook']} | | | | | | | failed: {r['why']} |")
            continue
        models = f"{r['widgets']['models']} ({r['widgets']['plotly']})"
        lines.append(
            f"| {r['notebook']} | {r['mb']:.1f} | {r['plotly_js']} | {r['figures']} | {r['diagrams']} "
            f"| {models} | {r['refused']} | {'yes' if r['ok'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--python", type=python_path, default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "labkit-exports")
    parser.add_argument("--runner", choices=["nbconvert", "papermill", "nbclient"], default="nbconvert")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds one notebook may take to run")
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("executed_copies: needs the playwright package (pip install playwright)", file=sys.stderr)
        return 2
    notebooks = notebooks_to_check(args.notebooks, "executed_copies")
    if notebooks is None:
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    reports = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            for notebook in notebooks:
                reports.append(check(browser, args.python, notebook, args.out, args.limit, args.runner))
                print(json.dumps(reports[-1]), flush=True)
        finally:
            browser.close()
    print(table(reports))
    print(f"(HTML files and full-page screenshots in {args.out})")
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
