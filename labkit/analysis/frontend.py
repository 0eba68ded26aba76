"""Is a front end drawing this kernel's widgets? Asked once per kernel, with a tiny widget.

A live plot is worth waiting for only where something draws it: JupyterLab,
Notebook 7, VS Code. Headless runners (``jupyter nbconvert --execute``,
papermill, nbclient) execute the same cells, accept the widget's messages and
never draw. The probe is an empty widget whose front-end code sends one message
back as soon as it is rendered, a fraction of a second in a live page; silence
for ``PROBE_TIMEOUT_S`` means nobody draws, and the answer is kept for the rest
of the kernel's life, so a headless run pays the wait once. The probe shows
nothing either way: an empty view where widgets are drawn, an empty text where
they are not (a headless run's saved copy holds no Python repr of it).

    if await draws_widgets():
        ...  # wait for the live figure to appear
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

# Long enough for a page still loading its extensions; a headless run pays it once per notebook.
PROBE_TIMEOUT_S = 2.0
# Once the wait is over, how long to read replies that arrived while the kernel was busy.
LISTEN_AT_LEAST_S = 0.3
# The probe's front-end half: report being drawn, show nothing.
PROBE_ESM = "export default { render({ model }) { model.send({ drawn: true }); } };"

_answer: bool | None = None  # per kernel: None until the probe has been asked


@dataclass
class _Question:
    """A probe on display, and what the front end said of it so far."""

    asked_at: float
    probe: Any
    handle: Any
    heard: list[bool] = field(default_factory=list)


_question: _Question | None = None


def _kernel() -> Any:
    """The IPython kernel this code runs in, or None (a plain interpreter, a terminal IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None)


def ask() -> None:
    """Show the probe now and collect the answer later (``draws_widgets``), so the wait
    overlaps whatever the notebook does meanwhile: a headless run then rarely waits at all.
    Does nothing outside a kernel, or once asked.

        lab.about()   # a notebook's first cell asks here
    """
    global _question
    if _question is not None or _answer is not None or _kernel() is None:
        return
    import anywidget
    from IPython.display import display

    class Probe(anywidget.AnyWidget):
        _esm = PROBE_ESM

        def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
            # Where nothing draws widgets (a headless run, its HTML copy) the output's text is
            # what shows: leave it empty, not the probe's Python repr.
            shown = super()._repr_mimebundle_(**kwargs)
            if shown is None:
                return None
            data, metadata = shown
            return {**data, "text/plain": ""}, metadata

    probe = Probe()
    question = _Question(time.monotonic(), probe, None)
    probe.on_msg(lambda widget, content, buffers: question.heard.append(bool(content.get("drawn"))))
    question.handle = display(probe, display_id=True)
    _question = question


async def draws_widgets(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True if a front end draws this kernel's widgets; asked once, then remembered.

    Outside a kernel the answer is False at once. In a kernel it shows an invisible
    probe widget (unless ``ask`` already did), waits until ``timeout`` after it was
    shown for its "drawn" message (the kernel reads front-end messages while this
    awaits), then removes the probe.
    """
    global _answer, _question
    if _answer is not None:
        return _answer
    if _kernel() is None:
        _answer = False
        return _answer
    ask()
    question = _question
    assert question is not None
    deadline = listen_until(question.asked_at, timeout, time.monotonic())
    while not question.heard and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if question.handle is not None:
        question.handle.update({"text/plain": ""}, raw=True)  # leave no trace of the probe
    question.probe.close()
    _answer, _question = any(question.heard), None
    return _answer


def listen_until(asked_at: float, timeout: float, now: float) -> float:
    """When to stop waiting for the probe's "drawn": ``timeout`` after it was shown, and never
    before a short listen from ``now`` (a reply that came while the kernel was busy is read only
    while this awaits).

    >>> listen_until(asked_at=100.0, timeout=2.0, now=100.5)  # shown just now: the timeout
    102.0
    >>> listen_until(asked_at=40.0, timeout=2.0, now=100.0)  # long past: only the short listen
    100.3
    """
    return max(asked_at + timeout, now + LISTEN_AT_LEAST_S)


def known() -> bool | None:
    """The answer if this kernel has asked already (True or False), else None; never waits."""
    return _answer


def forget() -> None:
    """Ask again next time (a test, or a page opened after a headless start)."""
    global _answer, _question
    _answer, _question = None, None
