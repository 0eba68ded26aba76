"""Notebooks join a room: with ``$LABKIT_URL`` (and ``$LABKIT_API_KEY``) ``lab.server()`` uses the
room's shared server instead of starting one, every labkit client sends the learner's key, and a
room that cannot be used says so in one sentence, in a notebook too, instead of going local.
Without them a notebook starts its own, and says so in one line when the official SDK's
``OPENAI_BASE_URL`` is set instead: labkit reads one set of variables, its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

from labkit import lab
from labkit.client import room

pytestmark = pytest.mark.slow  # a room's load

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


@pytest.fixture(autouse=True)
def no_room_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the variables it is about, and only those."""
    for name in (room.URL_ENV, room.KEY_ENV, room.NAME_ENV, room.SDK_URL_ENV, room.SDK_KEY_ENV):
        monkeypatch.delenv(name, raising=False)


def test_without_a_room_a_notebook_starts_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    own = lab.server()
    try:
        assert isinstance(own, lab.LabkitServer) and own.shared is False and own.processes()
        assert own.api_key == room.DEFAULT_KEY
        assert capsys.readouterr().out == ""  # nothing to say
    finally:
        own.close()


def test_the_sdks_variables_alone_are_named_not_silently_ignored(
    room_server: lab.LabkitServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The room's address in the official SDK's variables, as a learner might set them: the
    notebook runs on a server of its own, and one line says which variables labkit reads."""
    monkeypatch.setenv(room.SDK_URL_ENV, room_server.base_url)
    monkeypatch.setenv(room.SDK_KEY_ENV, KEYS[0])
    own = lab.server()
    try:
        assert isinstance(own, lab.LabkitServer) and own.shared is False
        (line,) = capsys.readouterr().out.splitlines()
        root = _root(room_server)
        assert line.startswith(
            "labkit: OPENAI_BASE_URL is set, but labkit reads LABKIT_URL and LABKIT_API_KEY"
        )
        assert f"LABKIT_URL={root} LABKIT_API_KEY=<your key>" in line and KEYS[0] not in line
    finally:
        own.close()


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({room.SDK_KEY_ENV: "sk-a-real-secret"}, None),  # usually a real key, for other programs
        ({room.KEY_ENV: KEYS[0]}, "LABKIT_API_KEY is set but LABKIT_URL is not"),
        ({room.URL_ENV: "http://127.0.0.1:9", room.SDK_URL_ENV: "http://127.0.0.1:9/v1"}, None),
    ],
)
def test_which_other_variables_get_a_line(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], says: str | None
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    line = room.unread_variables()
    assert line is None if says is None else (says in line and "sk-" not in line)


def test_a_name_that_cannot_be_one_is_a_sentence_before_any_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(room.NAME_ENV, "A" * 65)
    with pytest.raises(room.RoomError, match=r"^LABKIT_NAME 'A+' cannot be used: it is 65 characters long"):
        lab.server()


def test_in_a_room_every_client_sends_the_learners_key(
    room_server: lab.LabkitServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(room.URL_ENV, _root(room_server) + "/v1/")  # a pasted /v1/ is fine too
    monkeypatch.setenv(room.KEY_ENV, KEYS[0])
    monkeypatch.setenv(room.NAME_ENV, "Ada")
    monkeypatch.setenv(room.SDK_URL_ENV, "http://127.0.0.1:9/v1")  # LABKIT_URL wins, without a word
    joined = lab.server(args=["--profile", "local"])
    out = capsys.readouterr().out
    assert isinstance(joined, room.RoomServer) and joined.shared
    assert joined.base_url == room_server.base_url and joined.api_key == KEYS[0]
    assert f"using the room's server at {_root(room_server)} as Ada" in out
    assert "not applied here: --profile local" in out and "OPENAI" not in out

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


def test_a_notebook_that_cannot_reach_its_room_says_so_in_one_sentence(tmp_path: Path) -> None:
    """In a real kernel, as a notebook runs: the sentence alone, and no server of its own instead."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from labkit import lab\nserver = lab.server()")]
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True)
    client.execute(
        env={**os.environ, room.URL_ENV: "http://127.0.0.1:9", room.KEY_ENV: KEYS[0]}, cwd=tmp_path
    )
    (output,) = nb.cells[0].outputs
    assert output.output_type == "error" and output.ename == "RoomError"
    assert output.traceback == [
        "RoomError: the room's server at http://127.0.0.1:9 did not answer (ConnectError): "
        "check LABKIT_URL with your instructor, or unset it to run a server of your own"
    ]
