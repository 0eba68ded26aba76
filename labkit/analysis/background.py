"""Long work behind a widget, on a thread of its own.

A widget's button that ran its work in the kernel's thread would hold the cell (and every
other control) until it ended; a control moved meanwhile can stop sending its changes. So
the work runs on a thread, the cell that started it returns at once, and what the work
reports (progress, its result, its error) is handed back to the kernel's event loop, where
widget updates belong.

    task = Background("labkit-measure")
    task.start(lambda: slow_work(), on_done=lambda result, error: show(result, error))
    await task.done()      # in a notebook cell, to wait for it
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any


class Background:
    """One piece of work at a time on a daemon thread; its callbacks run in the kernel's loop.

    >>> task = Background("example")
    >>> seen = []
    >>> task.start(lambda: 6 * 7, on_done=lambda result, error: seen.append((result, error)))
    True
    >>> task.wait(); seen
    [(42, None)]
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, work: Callable[[], Any], on_done: Callable[[Any, Exception | None], None]) -> bool:
        """Run ``work`` on a thread; then ``on_done(result, None)``, or ``on_done(None, error)``
        if it raised. False (and nothing started) while earlier work still runs."""
        if self.running:
            return False
        try:
            self._loop = asyncio.get_running_loop()  # the kernel's: widget updates go through it
        except RuntimeError:
            self._loop = None

        def run() -> None:
            try:
                result = work()
            except Exception as exc:  # handed to on_done: the learner sees it, the widget stays usable
                self.in_main(functools.partial(on_done, None, exc))
            else:
                self.in_main(functools.partial(on_done, result, None))

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()
        return True

    def in_main(self, work: Callable[[], None]) -> None:
        """Run ``work`` in the kernel's event loop (at once, where there is none)."""
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(work)
        else:
            work()

    def wait(self, timeout: float = 120.0) -> None:
        """Block until the work has finished (outside an event loop)."""
        if self.thread is not None:
            self.thread.join(timeout)

    async def done(self, timeout: float = 120.0) -> None:
        """Wait in a notebook cell for the work to finish, the kernel serving the page meanwhile."""
        elapsed = 0.0
        while self.running and elapsed < timeout:
            await asyncio.sleep(0.1)
            elapsed += 0.1
        await asyncio.sleep(0.1)  # the last widget updates, queued for this loop
