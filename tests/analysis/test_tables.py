"""Designs compare in tables with units (medians of repeated runs, with their spread), and no
table cuts its text.
"""

from __future__ import annotations

import html
import subprocess
import sys

import pandas as pd
import pytest

from labkit import lab
from labkit.analysis import tables

pytestmark = pytest.mark.slow  # notebooks in real kernels

SCENARIO = "synthetic:turns=4,output_tokens=20,tool_tokens=300,instruction_tokens=200"


def test_compare_takes_medians_of_repeated_runs_and_states_their_spread(server: lab.LabkitServer) -> None:
    frames = lab.repeat(server.base_url, ["naive", "websocket"], SCENARIO, runs=3)
    assert [len(v) for v in frames.values()] == [3, 3]
    table = lab.compare(frames)
    assert list(table.index) == ["naive", "websocket"] and table.index.name == "design"
    e2e = [lab.summary(f)["e2e_s"] for f in frames["websocket"]]
    assert table.loc["websocket", tables.E2E] == pytest.approx(sorted(e2e)[1])
    assert table.loc["websocket", tables.SPREAD] == pytest.approx((max(e2e) - min(e2e)) / 2 / sorted(e2e)[1])
    assert table.loc["naive", "saved vs naive"] == 0
    assert table.loc["websocket", "saved vs naive"] == pytest.approx(
        1 - table.loc["websocket", tables.E2E] / table.loc["naive", tables.E2E]
    )
    assert table.loc["websocket", tables.RUNS] == 3

    single = lab.compare({d: runs[0] for d, runs in frames.items()}, baseline="websocket")
    assert tables.SPREAD not in single.columns and "saved vs websocket" in single.columns
    html = lab.styled(single).to_html()
    assert " s<" in html and " ms<" in html and "%<" in html  # every number in its unit


def test_compare_refuses_a_baseline_it_does_not_have() -> None:
    frame = pd.DataFrame()
    with pytest.raises(ValueError, match="'sprint' is not among"):
        lab.compare({"naive": frame}, baseline="sprint")


def test_styled_shows_counts_as_numbers_and_shares_in_percent() -> None:
    table = pd.DataFrame(
        {"input tokens": [15000.0, 450.0], "saved vs naive": [0.0, 0.45], "mean TTFT (ms)": [62.4, 51.0]},
        index=["naive", "websocket"],
    )
    html = lab.styled(table).to_html()
    assert "15,000<" in html and "45%<" in html and "62 ms<" in html and "1500000%" not in html


# ---------------------------------------------------------------- text shown whole

LONG = "Vercel integrated the WebSocket mode into the AI SDK and saw latency reductions of up to 40%."


def shown(value: object) -> dict[str, str]:
    """What a notebook stores for a cell's last value: IPython's formatter, HTML and text, with
    pandas' options as in a Jupyter kernel (no terminal: 20 columns, 80 characters wide)."""
    from IPython.core.formatters import DisplayFormatter

    with pd.option_context("display.max_columns", 20, "display.width", 80):
        data, _ = DisplayFormatter().format(value)
    return {kind: html.unescape(data[kind]) for kind in ("text/html", "text/plain") if kind in data}


def test_importing_lab_lets_pandas_show_a_long_cell_whole() -> None:
    """In a fresh interpreter: pandas cuts a 120-character cell at 50 characters, until
    ``from labkit import lab``."""
    program = (
        "import pandas as pd\n"
        "from IPython.core.formatters import DisplayFormatter\n"
        "cell = 'x' * 119 + 'y'\n"
        "frame = pd.DataFrame({'text': [cell]})\n"
        "def whole():\n"
        "    data, _ = DisplayFormatter().format(frame)\n"
        "    return [cell in data[kind] for kind in ('text/html', 'text/plain')]\n"
        "print(whole())\n"
        "from labkit import lab\n"
        "print(whole())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[False, False]", "[True, True]"]


def test_labkit_tables_show_their_text_whole() -> None:
    assert len(LONG) > 50
    frame = pd.DataFrame({"their words": [LONG], "figure (%)": [0.4]}, index=["Vercel AI SDK"])
    for table in (frame, lab.styled(frame)):
        assert LONG in shown(table)["text/html"]
    assert LONG in shown(frame)["text/plain"]
    terms = lab.glossary()
    longest = max(terms["meaning"], key=len)
    assert len(longest) > 100
    assert all(longest in text for text in shown(terms).values())
    plans = lab.plan_table()
    longest_plan = max((cell for column in plans.columns for cell in plans[column]), key=len)
    assert len(longest_plan) > 50
    assert all(longest_plan in text for text in shown(plans).values())


# ---------------------------------------------------------------- numbers as precise as they are


def test_styled_reads_numbers_held_as_objects_and_never_shows_raw_floats_or_negative_zeros() -> None:
    """A table built row by row and turned (numbers held as objects beside text) showed its
    floats raw (``8.415005``, ``0.027952``); a share that rounds to nothing showed ``-0%``."""
    before, after = "before (ms a turn)", "after (ms a turn)"
    rows = {
        "+ no intermediary hop": {"stage": "intermediary", before: 8.415005, after: 0.027952},
        "+ fast classifiers": {"stage": "input_safety", before: 22.2, after: 0.0},
    }
    turned = pd.DataFrame(rows).T
    assert turned[before].dtype == object  # as the notebook built it
    text = lab.styled(turned).to_html()
    assert ">8.4 ms<" in text and ">0.03 ms<" in text and ">22 ms<" in text and ">0 ms<" in text
    assert "8.415005" not in text and "0.027952" not in text
    shares = pd.DataFrame({"saved vs naive": [0.0, -0.004, -0.0001, 0.45], "saved (s)": [0.0, -0.001, 0, 1]})
    text = lab.styled(shares).to_html()
    assert ">0%<" in text and ">-0.4%<" in text and ">45%<" in text and ">0.00 s<" in text
    assert "-0%" not in text and "-0.00" not in text
