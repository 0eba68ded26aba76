"""Is a front end drawing this kernel's widgets? Asked once per kernel, with a tiny widget.

A live plot is worth waiting for only where something draws it: JupyterLab,
Notebook 7, VS Code. Headless runners (``jupyter nbconvert --execute``,
papermill, nbclient) execute the same cells, accept the widget's messages and
never draw. The probe is an empty widget whose front-end code sends one message
back as soon as it is rendered, a fraction of a second in a live page; silence
for ``PROBE_TIMEOUT_S`` means nobody draws, and the answer is kept for the rest
of the kernel's life, so a headless run pays the wait once.

    if await draws_widgets():
        ...  # wait for the live figure to appear
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

# Long enough for a page still loading its extensions; a headless run pays it once per notebook.
PROBE_TIMEOUT_S = 2.0
# The probe's front-end half: report being drawn, show nothing.
PROBE_ESM = "export default { render({ model }) { model.send({ drawn: true }); } };"

_answer: bool | None = None  # per kernel: None until the probe has been asked


def _kernel() -> Any:
    """The IPython kernel this code runs in, or None (a plain interpreter, a terminal IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None)


async def draws_widgets(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """True if a front end draws this kernel's widgets; asked once, then remembered.

    Outside a kernel the answer is False at once. In a kernel it displays an
    invisible probe widget, waits up to ``timeout`` for its "drawn" message (the
    kernel reads front-end messages while this awaits), then removes the probe.
    """
    global _answer
    if _answer is not None:
        return _answer
    if _kernel() is None:
        _answer = False
        return _answer
    _answer = await _ask(timeout)
    return _answer


async def _ask(timeout: float) -> bool:
    import anywidget
    from IPython.display import display

    class Probe(anywidget.AnyWidget):
        _esm = PROBE_ESM

    probe = Probe()
    heard: list[bool] = []
    probe.on_msg(lambda widget, content, buffers: heard.append(bool(content.get("drawn"))))
    handle = display(probe, display_id=True)
    deadline = time.monotonic() + timeout
    while not heard and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if handle is not None:
        handle.update({"text/plain": ""}, raw=True)  # leave no trace of the probe in the notebook
    probe.close()
    return any(heard)


def forget() -> None:
    """Ask again next time (a test, or a page opened after a headless start)."""
    global _answer
    _answer = None
