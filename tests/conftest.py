"""Shared fixtures and helpers: a real ``labkit serve`` subprocess on loopback, official SDK clients,
a room's server and its strict checks, the model catalogue without overrides, and what /proc says
of several workers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.engine.catalogue import MODELS_ENV
from tests.helpers import API_KEY, KEY_A, KEY_B, ROOM_ARGS, profile_with


@pytest.fixture(scope="session")
def server() -> Iterator[LabkitServer]:
    """One server for the whole session (each test makes its own conversations)."""
    with LabkitServer() as srv:
        yield srv


@pytest.fixture
def client(server: LabkitServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def slow_billing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No modeled delays but a 300 ms billing service, so an overlapped charge is visibly pending
    (and still queued when a server is told to stop)."""
    return profile_with(tmp_path_factory.mktemp("profiles"), "slow-billing", billing={"hop_ms": 300})


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that this test holds, listening, for its whole duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def room() -> Iterator[LabkitServer]:
    """A server with ``ROOM_ARGS``, one per test module that asks for it."""
    with LabkitServer(args=ROOM_ARGS) as srv:
        yield srv


@pytest.fixture(scope="module")
def one_at_a_time() -> Iterator[LabkitServer]:
    """Keys ``KEY_A`` and ``KEY_B``, each capped at one open connection and one request in flight."""
    args = ["--profile", "local", "--api-key", KEY_A, "--api-key", KEY_B]
    args += ["--max-connections-per-key", "1", "--max-requests-per-key", "1"]
    with LabkitServer(args=args) as srv:
        yield srv


# ---------------------------------------------------------------- the model catalogue


@pytest.fixture
def front_end_draws_widgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel knows a front end draws widgets, as in a learner's JupyterLab: every live figure
    is a widget from the start (nothing draws it here; the tests read what it holds)."""
    from labkit.analysis import frontend

    monkeypatch.setattr(frontend, "_answer", True)


@pytest.fixture
def no_env_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODELS_ENV, raising=False)
