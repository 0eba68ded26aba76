"""An executed notebook's HTML copy is whole offline: plotly.js once in the page, no plotly widget
in the stored widget state, every figure static, diagrams as pictures inside the page.

A small notebook made here runs in a real kernel under nbclient (what ``jupyter nbconvert
--execute``, papermill and ``jupyter execute`` run) and is exported with nbconvert's lab
template, as docs/measuring.md's "Executed copies" does. Its live plots are shown before the kernel
has learnt that nothing draws widgets, as a notebook's first plots are. The notebooks' own
exports are checked, in a browser with the network refused, by ``benchmarks/executed_copies.py``.
"""

from __future__ import annotations

import base64
import json
import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from labkit.analysis.live import PLOTLY_MIME

pytestmark = pytest.mark.slow  # a notebook in a real kernel

# A sentence plotly.js holds once, in its own file and in plotly's widget bundle alike.
PLOTLY_JS_MARK = "No DOM element with id"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# The smallest PNG: one white pixel.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
        "0000000c4944415478da63f8ffff3f0005fe02fea7d6a4c40000000049454e44ae426082"
    )
).decode()

CELLS = [
    "from IPython.display import display\n"
    "import ipywidgets\n"
    "import plotly.graph_objects as go\n"
    "from labkit.analysis import frontend, live\n"
    "frontend.ask()  # as lab.about() does in a notebook's first cell\n"
    "def draw(n):\n"
    "    return go.Figure(go.Bar(y=list(range(n))))",
    # shown and built before the probe's answer: each case could leave a widget behind
    "first, second, in_layout = live.LivePlot(draw), live.LivePlot(draw), live.LivePlot(draw)\n"
    "first.show(0)\n"
    "second.show(0)\n"
    "display(ipywidgets.VBox([ipywidgets.Label('a lab'), in_layout.build(0)]))\n"
    "await live.shown(first, second, in_layout)",
    "for n in range(1, 4):\n"
    "    first.update(n)\n"
    "    second.update(n)\n"
    "    in_layout.update(n)\n"
    "first.finish()\n"
    "second.finish()\n"
    "live.show(draw(2))\n"
    "display(live.static(in_layout.figure))  # as a lab's static_figures() does headless",
]
DIAGRAM = (
    "![A diagram](attachment:diagram.png)\n\n"
    "<details><summary>The diagram as text (Mermaid)</summary>\n\n"
    "```text\nsequenceDiagram\n    A->>B: hello\n```\n\n</details>"
)


@pytest.fixture(scope="module")
def executed() -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    diagram = nbformat.v4.new_markdown_cell(DIAGRAM, attachments={"diagram.png": {"image/png": PIXEL}})
    notebook.cells = [diagram, *(nbformat.v4.new_code_cell(source) for source in CELLS)]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    return notebook


@pytest.fixture(scope="module")
def page(executed: nbformat.NotebookNode) -> str:
    html, _ = HTMLExporter(template_name="lab").from_notebook_node(executed)
    return html


def test_every_figure_is_left_static(executed: nbformat.NotebookNode) -> None:
    outputs = [output for cell in executed.cells for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if PLOTLY_MIME in o.get("data", {})]
    assert len(figures) == 4  # two live plots, a finished figure, the lab's figure
    assert [len(f["data"][PLOTLY_MIME]["data"][0]["y"]) for f in figures] == [3, 3, 2, 3]  # the last drawing


def test_no_plotly_widget_is_stored(executed: nbformat.NotebookNode) -> None:
    """Each plotly widget's state carries plotly's whole bundle: a headless run makes none."""
    state = executed.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    assert state, "the run stored widget state (the probe's, the lab's layout)"
    assert not [m for m in state.values() if PLOTLY_JS_MARK in json.dumps(m)]
    assert len(json.dumps(state)) < 20_000


def test_the_page_carries_plotly_js_once_and_fetches_no_figure_or_diagram(page: str) -> None:
    assert page.count(PLOTLY_JS_MARK) == 1  # embedded in the first static figure only
    scripts = re.findall(r"<script[^>]*\ssrc=\"([^\"]+)\"", page)
    assert not [s for s in scripts if "plot" in s or "mermaid" in s], scripts
    assert 'class="jp-Mermaid"' not in page  # the template imports Mermaid from a CDN for these
    assert f'src="data:image/png;base64,{PIXEL}"' in page  # the attachment, inlined
    assert page.count('id="labkit-') == 4  # each static figure's own place, drawn by the page's plotly.js
