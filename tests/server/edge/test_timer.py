"""The server asks Windows for 1 ms timer ticks for its lifetime and gives them back; elsewhere
there is no timer to raise.
"""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from labkit.server import app as app_module
from labkit.server.edge import timer

# ---------------------------------------------------------------- the system timer (Windows)


class FakeWinmm:
    def __init__(self, answer: int = 0) -> None:
        self.answer = answer
        self.calls: list[tuple[str, int]] = []

    def timeBeginPeriod(self, period_ms: int) -> int:
        self.calls.append(("begin", period_ms))
        return self.answer

    def timeEndPeriod(self, period_ms: int) -> int:
        self.calls.append(("end", period_ms))
        return 0


def test_the_server_asks_windows_for_1_ms_ticks_and_gives_them_back() -> None:
    winmm = FakeWinmm()
    with timer.fine_system_timer(winmm) as granted:
        assert granted and winmm.calls == [("begin", 1)]
    assert winmm.calls == [("begin", 1), ("end", 1)]


def test_a_refused_request_is_not_given_back() -> None:
    winmm = FakeWinmm(answer=97)  # TIMERR_NOCANDO
    with timer.fine_system_timer(winmm) as granted:
        assert not granted
    assert winmm.calls == [("begin", 1)]


def test_off_windows_there_is_no_timer_to_raise() -> None:
    assert timer._winmm() is None
    assert timer.raise_resolution() is False
    timer.restore_resolution()  # does nothing


def test_the_app_holds_fine_ticks_for_its_lifetime(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    winmm = FakeWinmm()
    monkeypatch.setattr(app_module, "raise_resolution", lambda: timer.raise_resolution(winmm))
    monkeypatch.setattr(app_module, "restore_resolution", lambda: timer.restore_resolution(winmm))
    config = app_module.ServerConfig(db=str(tmp_path / "db.sqlite3"), profile="local")
    with TestClient(app_module.create_app(config)) as client:
        assert client.get("/healthz").status_code == 200
        assert winmm.calls == [("begin", 1)]
    assert winmm.calls == [("begin", 1), ("end", 1)]
