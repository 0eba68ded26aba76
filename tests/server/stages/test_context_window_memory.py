"""The issue's case on the real process: ``store: false`` follow-ups of about 1.9 MB on one
WebSocket no longer grow what the connection holds, because ``labkit-spark``'s window refuses them.

A ``labkit serve`` subprocess on loopback (the ``local`` profile, and ``labkit-spark`` with its
built-in window but a prefill that costs no time, so a follow-up is the service's work only),
and a raw WebSocket client sending frames just under the 2 MiB limit. Each follow-up's text is
about 92,700 tokens: the first create fits the model's 95,232-token input limit, and a
follow-up on it would hold about 185,000. The old server served every one, and its memory grew
with each (about 8 MB a follow-up here: the history's text, its token ids, the prefix cache's
blocks). What is asserted is the mechanism (the API's refusal, in its shape) and, from
``/proc``, that each later follow-up adds on average less than half of what one served follow-up
added to the server's resident memory: a ratio of two growths measured in one run. (A refusal
raised from a local variable kept its request's megabytes in a reference cycle until the
garbage collector ran, a megabyte or two a refused fork: ``labkit.server.stages.context_window.too_long``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from tests.helpers import auth_headers

pytestmark = pytest.mark.slow  # megabytes of input, a server of its own

MODEL = "labkit-spark"
LINE = "-" * 40 + "\n"  # two tokens a line: about 20.5 bytes a token
TEXT = LINE * (1_900_000 // len(LINE))  # about 1.9 MB, 92,682 tokens
FOLLOW_UPS = 8
LATER = FOLLOW_UPS - 2  # the follow-ups after the first refused one, whose growth is compared
# Refused forks before the forks compared: the first requests of a size warm what the server
# allocates once for it (the worker threads that tokenize, and their buffers).
WARM_FORKS = 2
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:  # shadows conftest's
    models = tmp_path_factory.mktemp("models") / "models.toml"
    models.write_text(f"[models.{MODEL}]\nprefill_tps = 1000000000\n")  # the built-in window stays
    with LabkitServer(args=["--profile", "local", "--models", str(models)]) as running:
        yield running


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def create(ws: ClientConnection, text: str, **fields: Any) -> dict[str, Any]:
    """One ``response.create``: its terminal event, or its error event."""
    ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": text, "store": False, **fields}))
    while True:
        event = json.loads(ws.recv(timeout=120))
        if event["type"] in TERMINAL:
            return event


def test_follow_ups_past_the_window_are_refused_and_memory_stays_flat(server: LabkitServer) -> None:
    pid = server.processes()[0]
    with connect(server.ws_url, additional_headers=auth_headers(), open_timeout=10, max_size=None) as ws:
        create(ws, "Warm up.")  # the tokenizer, the classifier, the engine's first allocations
        before = rss_kb(pid)
        first = create(ws, "turn 0\n" + TEXT)
        assert first["type"] == "response.completed", first
        served = rss_kb(pid) - before  # what one served follow-up of this size added
        last, answers = first["response"]["id"], []
        for turn in range(1, FOLLOW_UPS):
            answer = create(ws, f"turn {turn}\n" + TEXT, previous_response_id=last)
            answers.append(answer)
            if answer["type"] == "response.completed":
                last = answer["response"]["id"]
            if turn == 1:
                after_first_follow_up = rss_kb(pid)
        grown = rss_kb(pid) - after_first_follow_up
    # The old server completed every one, the conversation growing by ~92,700 tokens each.
    refused = answers[0]
    assert refused["type"] == "error" and refused["status"] == 400, refused
    assert refused["error"]["code"] == "context_length_exceeded" and refused["error"]["param"] == "input"
    assert "reads at most 95,232" in refused["error"]["message"]
    assert grown / LATER < served / 2, (served, grown)


def test_forks_past_the_window_are_refused_and_leave_nothing_behind(server: LabkitServer) -> None:
    """Each fork onto a lane of its own renders ~92,700 new tokens onto the cached parent and is
    refused; the parent stays for its own lane, and none of the refused renderings is kept."""
    pid = server.processes()[0]
    with connect(server.ws_url, additional_headers=auth_headers(), open_timeout=10, max_size=None) as ws:
        create(ws, "Warm up.")
        before = rss_kb(pid)
        parent = create(ws, "root\n" + TEXT)
        assert parent["type"] == "response.completed", parent
        served = rss_kb(pid) - before
        forks = []
        for lane in range(1, WARM_FORKS + LATER + 1):
            fork = create(
                ws,
                f"lane {lane}\n" + TEXT,
                previous_response_id=parent["response"]["id"],
                stream_id=f"l{lane}",
            )
            forks.append(fork)
            if lane == WARM_FORKS:
                after_warm_forks = rss_kb(pid)
        grown = rss_kb(pid) - after_warm_forks
        own = create(ws, "And now?", previous_response_id=parent["response"]["id"])
    assert [f["error"]["code"] for f in forks] == ["context_length_exceeded"] * len(forks), forks
    assert own["type"] == "response.completed", own  # the parent, untouched, served its own lane
    assert grown / LATER < served / 2, (served, grown)
