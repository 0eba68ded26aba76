"""Notebooks join a room: with ``$LABKIT_URL`` (and ``$LABKIT_API_KEY``) ``lab.server()`` uses the
room's shared server instead of starting one, every labkit client sends the learner's key, and a
room that cannot be used says so in one sentence. Without them nothing changes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from labkit import lab
from labkit.client import room

KEYS = ("sk-room-ada", "sk-room-bo")
SCENARIO = "synthetic:turns=3,output_tokens=20,tool_tokens=200,instruction_tokens=200"


@pytest.fixture(scope="module")
def room_server() -> Iterator[lab.LabkitServer]:
    """The instructor's server: keys required, one for each learner."""
    args = [arg for key in KEYS for arg in ("--api-key", key)]
    with lab.LabkitServer(args=args) as srv:
        yield srv


def _root(srv: lab.LabkitServer) -> str:
    return srv.base_url.removesuffix("/v1")


def test_without_a_room_a_notebook_starts_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(room.URL_ENV, raising=False)
    monkeypatch.delenv(room.KEY_ENV, raising=False)
    own = lab.server()
    try:
        assert isinstance(own, lab.LabkitServer) and own.shared is False and own.processes()
        assert own.api_key == room.DEFAULT_KEY
    finally:
        own.close()


def test_in_a_room_every_client_sends_the_learners_key(
    room_server: lab.LabkitServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(room.URL_ENV, _root(room_server) + "/v1/")  # a pasted /v1/ is fine too
    monkeypatch.setenv(room.KEY_ENV, KEYS[0])
    joined = lab.server(args=["--profile", "local"])
    out = capsys.readouterr().out
    assert isinstance(joined, lab.RoomServer) and joined.shared
    assert joined.base_url == room_server.base_url and joined.api_key == KEYS[0]
    assert "using the room's server" in out and "not applied here: --profile local" in out

    rollout = lab.Rollout.run(joined.base_url, "websocket", SCENARIO)  # no key passed: the learner's
    ids = [record.response_id for record in rollout.records]
    assert len(rollout.frame()) > 0  # its spans were fetched with the same key
    mine = lab.fetch_spans(joined.base_url, ids[:1], api_key=KEYS[0])
    assert mine[ids[0]], "the learner's own key sees its spans"
    with pytest.raises(httpx.HTTPStatusError):
        lab.fetch_spans(joined.base_url, ids[:1], api_key=KEYS[1])  # another learner's key does not

    joined.close()  # leaves the room's server running
    assert httpx.get(f"{_root(room_server)}/healthz", timeout=5).status_code == 200
    with pytest.raises(room.RoomError, match="shared"):
        joined.restart()


@pytest.mark.parametrize(
    ("url", "key", "says"),
    [
        ("ROOT", "sk-not-a-room-key", "refused the key in LABKIT_API_KEY"),
        ("http://127.0.0.1:9", KEYS[0], "did not answer"),
        ("10.0.0.5:8765", KEYS[0], "is not a server address"),
    ],
)
def test_a_room_that_cannot_be_used_says_why_in_one_sentence(
    room_server: lab.LabkitServer, monkeypatch: pytest.MonkeyPatch, url: str, key: str, says: str
) -> None:
    monkeypatch.setenv(room.URL_ENV, _root(room_server) if url == "ROOT" else url)
    monkeypatch.setenv(room.KEY_ENV, key)
    with pytest.raises(room.RoomError, match=says) as failure:
        lab.server()
    assert "\n" not in str(failure.value)
