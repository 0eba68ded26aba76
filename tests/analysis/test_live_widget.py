"""The live widget of a figure with a log axis: a layout plotly's widget finishes drawing.

In JupyterLab, plotly's widget never finished its first draw of a log axis with automatic
margins (plotly's default template turns them on): the view drew but never reported it, so a
live plot waited out its timeout and was swapped for a static copy at the end. Checked here
without a browser: what the widget holds, and that the figure the static copy shows is the
pure function's.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from labkit.analysis import frontend, live, plots

RUNS = pd.DataFrame(
    [
        {"strategy": "steer", "tps": 1000, "seconds": 0.05},
        {"strategy": "wait", "tps": 1000, "seconds": 0.4},
        {"strategy": "resend", "tps": 65, "seconds": 0.5},
    ]
)


@pytest.fixture
def live_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose front end draws widgets, and a display that shows nothing."""

    class Handle:
        def update(self, obj: Any) -> None:
            pass

    monkeypatch.setattr(frontend, "_answer", True)
    monkeypatch.setattr("IPython.display.display", lambda *args, **kwargs: Handle())


def test_a_log_axis_gets_fixed_margins_in_the_widget_only(live_page: None) -> None:
    plot = live.LivePlot(plots.correction_times).show(None)
    assert plot.widget is not None
    assert plot.widget.layout.yaxis.type == "log"
    assert plot.widget.layout.yaxis.automargin is False
    plot.update(RUNS)  # an update sends the whole layout again: it keeps the fixed margins
    assert plot.widget.layout.yaxis.automargin is False
    assert [len(bar.y) for bar in plot.widget.data] == [1, 2]  # and the measurements so far
    # the figure the static copy shows is the drawing function's, margins and all
    assert plot.figure is not None and plot.figure.layout.yaxis.automargin is None
    assert plot.figure.layout.template.layout.yaxis.automargin is True


def test_an_axis_that_is_not_log_keeps_its_automatic_margins(live_page: None) -> None:
    plot = live.LivePlot(plots.correction_times).show(RUNS)
    assert plot.widget is not None
    assert plot.widget.layout.xaxis.automargin is None  # the template's, as in the static copy
