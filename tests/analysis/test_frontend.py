"""The probe that tells a front end drawing widgets from a headless runner."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labkit.analysis import frontend


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontend, "_answer", None)


@pytest.fixture
def in_a_kernel(monkeypatch: pytest.MonkeyPatch, fresh: None) -> list[Any]:
    """Pretend to run in a kernel; remember what was displayed and what it became."""
    shown: list[Any] = []

    class Handle:
        def update(self, obj: Any, raw: bool = False) -> None:
            shown.append(obj)

    def display(obj: Any, display_id: bool = False) -> Handle:
        shown.append(obj)
        return Handle()

    monkeypatch.setattr(frontend, "_kernel", lambda: object())
    monkeypatch.setattr("IPython.display.display", display)
    return shown


def test_outside_a_kernel_nothing_draws(fresh: None) -> None:
    assert asyncio.run(frontend.draws_widgets(timeout=60)) is False


def test_a_front_end_that_renders_the_probe_answers(in_a_kernel: list[Any]) -> None:
    async def run() -> bool:
        async def front_end() -> None:
            while not in_a_kernel:
                await asyncio.sleep(0.01)
            probe = in_a_kernel[0]
            assert frontend.PROBE_ESM in probe._esm  # the front end runs this and replies:
            probe._handle_custom_msg({"drawn": True}, [])

        replier = asyncio.create_task(front_end())
        answer = await frontend.draws_widgets(timeout=30)
        await replier
        return answer

    assert asyncio.run(run()) is True
    assert in_a_kernel[-1] == {"text/plain": ""}  # the probe leaves an empty output behind


def test_silence_means_headless_and_is_asked_once(in_a_kernel: list[Any]) -> None:
    assert asyncio.run(frontend.draws_widgets(timeout=0.2)) is False
    probes = len(in_a_kernel)
    assert asyncio.run(frontend.draws_widgets(timeout=60)) is False  # remembered: no second wait
    assert len(in_a_kernel) == probes


def test_asked_early_the_answer_is_collected_later(in_a_kernel: list[Any]) -> None:
    frontend.ask()  # a notebook's first cell
    probe = in_a_kernel[0]
    probe._handle_custom_msg({"drawn": True}, [])  # the front end rendered it meanwhile
    assert asyncio.run(frontend.draws_widgets(timeout=30)) is True


def test_asked_early_a_headless_run_has_waited_it_out(
    in_a_kernel: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend.ask()
    question = frontend._question
    assert question is not None
    question.asked_at -= 60  # the notebook's first cells took a while: the timeout is long past
    deadlines: list[float] = []
    listen_until = frontend.listen_until
    monkeypatch.setattr(
        frontend, "listen_until", lambda *args: deadlines.append(listen_until(*args)) or deadlines[-1]
    )
    assert asyncio.run(frontend.draws_widgets(timeout=2)) is False
    # Only the short listen for late replies from now, not the whole timeout from when it was asked.
    assert deadlines[0] - question.asked_at > 60


def test_the_probe_shows_no_python_repr_where_nothing_draws_widgets(in_a_kernel: list[Any]) -> None:
    """A headless run saves the probe's output as text: it must be empty, never
    ``<labkit.analysis.frontend.ask.<locals>.Probe object at 0x…>``."""
    frontend.ask()
    data, _metadata = in_a_kernel[0]._repr_mimebundle_()
    assert data["text/plain"] == ""
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == in_a_kernel[0].model_id
