"""What steering is for, measured: the time from a user's correction to the first token that
answers it, while the agent is writing a long answer.

Three ways to get a correction to a model that is mid-answer, each on a real server:

- ``steer``: WebSocket mode; the client sends ``response.steer`` for the running response. It
  stops at its next sentence end and a successor, served from the connection cache, answers.
- ``wait``: WebSocket mode; the client waits for the answer to finish, then sends a follow-up
  ``response.create`` with ``previous_response_id`` and the correction.
- ``resend``: stateless HTTP; the client abandons the stream and sends the whole conversation
  again (the instructions, the question, what it has read of the answer, the correction).

Each run: a session of ``history_tokens`` of instructions, a question whose answer is
``answer_tokens`` long, and the correction sent once the client has read ``after_tokens`` of it.
The clock starts when the correction is sent and stops at the first text delta of the response
that answers it, both on the client (``time.perf_counter``). The clients are plain ``websockets``
and ``httpx`` readers that only timestamp frames, so the measurement is the server's and the
network's, not a client's parsing.

    from labkit.client.launcher import LabkitServer
    with LabkitServer(args=["--profile", "production-like"]) as server:
        table = correction_latency(server.base_url, tps=(1000,), repeat=1)
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import pandas as pd
from websockets.sync.client import ClientConnection, connect

from labkit.api.event_types import (
    OUTPUT_TEXT_DELTA,
    RESPONSE_CREATE,
    RESPONSE_CREATED,
    RESPONSE_STEER,
    TERMINAL_EVENTS,
)
from labkit.text.passage import text_of_tokens
from labkit.text.tokenizer import encode_text

STRATEGIES = ("steer", "wait", "resend")
MODELS = {65: "labkit-classic", 1000: "labkit-spark"}  # the catalogue's models at those speeds
CORRECTION = "Stop: the failing test is in the date parser. Look there first."
TIMEOUT_S = 120.0  # a safety net against a hung server, not a measurement


@dataclass(frozen=True)
class Correction:
    """One measured correction."""

    strategy: str
    tps: int
    seconds: float  # from sending the correction to the first token of its answer
    read_after: int  # tokens of the old answer the client still read after sending it


def measure(
    base_url: str,
    strategy: str,
    model: str,
    *,
    answer_tokens: int = 1000,
    after_tokens: int = 50,
    history_tokens: int = 4000,
    api_key: str = "sk-local",
) -> tuple[float, int]:
    """One run of ``strategy``: seconds from the correction to the first token answering it, and
    the tokens of the old answer read after the correction was sent."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    session = {
        "model": model,
        "instructions": f"Session {uuid.uuid4().hex}. " + text_of_tokens(history_tokens),
        "store": False,
    }
    question = f"Write {answer_tokens} tokens about the failing build."
    if strategy == "resend":
        return _resend(base_url, api_key, session, question, after_tokens)
    ws_url = base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/responses"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {api_key}"}, max_size=None) as ws:
        ws.send(json.dumps({"type": RESPONSE_CREATE, **session, "input": question}))
        target, sent_at = _read_until_correction(ws, after_tokens)
        if strategy == "steer":
            steer = {"type": RESPONSE_STEER, "previous_response_id": target, "input": CORRECTION}
            ws.send(json.dumps(steer))
            return _first_answer(
                ws, sent_at, lambda event: event["response"]["previous_response_id"] == target
            )
        read_after = 0
        for event in _events(ws):  # wait: the rest of the answer, then the follow-up
            if event["type"] == OUTPUT_TEXT_DELTA:
                read_after += len(encode_text(event["delta"]))
            elif event["type"] in TERMINAL_EVENTS:
                break
        follow_up = {"type": RESPONSE_CREATE, **session, "previous_response_id": target, "input": CORRECTION}
        ws.send(json.dumps(follow_up))
        seconds, _ = _first_answer(ws, sent_at, lambda event: True)
        return seconds, read_after


def _events(ws: ClientConnection) -> Iterator[dict[str, Any]]:
    while True:
        event = json.loads(ws.recv(timeout=TIMEOUT_S))
        if event["type"] == "error":
            raise RuntimeError(f"the server answered with an error: {event['error']['message']}")
        yield event


def _read_until_correction(ws: ClientConnection, after_tokens: int) -> tuple[str, float]:
    """Read the long answer until ``after_tokens`` of it have arrived; its id and the moment the
    correction is sent."""
    target, read = "", 0
    for event in _events(ws):
        if event["type"] == RESPONSE_CREATED:
            target = event["response"]["id"]
        elif event["type"] == OUTPUT_TEXT_DELTA:
            read += len(encode_text(event["delta"]))
            if read >= after_tokens:
                return target, time.perf_counter()
        elif event["type"] in TERMINAL_EVENTS:
            break
    raise RuntimeError("the answer ended before the correction: ask for a longer one")


def _first_answer(ws: ClientConnection, sent_at: float, is_answer: Any) -> tuple[float, int]:
    """Seconds to the first text delta of the response that answers (the first ``response.created``
    for which ``is_answer`` holds), and the old answer's tokens read meanwhile. On one lane the
    old answer's terminal event comes before that ``response.created``."""
    answering, read_after = None, 0
    for event in _events(ws):
        if event["type"] == RESPONSE_CREATED and answering is None and is_answer(event):
            answering = event["response"]["id"]
        elif event["type"] == OUTPUT_TEXT_DELTA:
            if answering is not None:  # on one lane, every delta after its created is its own
                return time.perf_counter() - sent_at, read_after
            read_after += len(encode_text(event["delta"]))
    raise RuntimeError("the connection ended before the answer")


def _resend(
    base_url: str, api_key: str, session: dict[str, Any], question: str, after_tokens: int
) -> tuple[float, int]:
    """Stateless HTTP: read the stream until the correction, abandon it, send everything again."""
    headers = {"Authorization": f"Bearer {api_key}"}
    partial: list[str] = []
    with httpx.Client(timeout=TIMEOUT_S, headers=headers) as http:
        body = {**session, "input": question, "stream": True}
        with http.stream("POST", f"{base_url}/responses", json=body) as reply:
            read = 0
            for event in _sse(reply):
                if event["type"] == OUTPUT_TEXT_DELTA:
                    partial.append(event["delta"])
                    read += len(encode_text(event["delta"]))
                    if read >= after_tokens:
                        break
            sent_at = time.perf_counter()  # closing the stream abandons the answer
        history = [
            {"role": "user", "content": question},
            {"role": "assistant", "content": "".join(partial)},
            {"role": "user", "content": CORRECTION},
        ]
        with http.stream(
            "POST", f"{base_url}/responses", json={**session, "input": history, "stream": True}
        ) as reply:
            for event in _sse(reply):
                if event["type"] == OUTPUT_TEXT_DELTA:
                    return time.perf_counter() - sent_at, 0
    raise RuntimeError("the resent request ended without an answer")


def _sse(reply: httpx.Response) -> Iterator[dict[str, Any]]:
    if reply.status_code != 200:
        reply.read()
        raise RuntimeError(f"the server answered {reply.status_code}: {reply.text[:200]}")
    for line in reply.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def correction_latency(
    base_url: str,
    *,
    tps: Sequence[int] = (65, 1000),
    repeat: int = 3,
    answer_tokens: int = 1000,
    after_tokens: int = 50,
    history_tokens: int = 4000,
    api_key: str = "sk-local",
) -> pd.DataFrame:
    """Every strategy at each speed, ``repeat`` times, taking turns (so a slow moment of the
    machine falls on all of them): one row per run (``strategy``, ``tps``, ``seconds``,
    ``read_after``). ``summary`` turns it into one row per speed with the ratios.

    A notebook's few-second version: ``correction_latency(url, tps=(1000,), repeat=1,
    answer_tokens=400, after_tokens=40)``.
    """
    for speed in tps:
        if speed not in MODELS:
            raise ValueError(f"no model at {speed} tokens/s: one of {sorted(MODELS)}")
    rows = []
    for _ in range(repeat):
        for speed in tps:
            for strategy in STRATEGIES:
                seconds, read_after = measure(
                    base_url,
                    strategy,
                    MODELS[speed],
                    answer_tokens=answer_tokens,
                    after_tokens=after_tokens,
                    history_tokens=history_tokens,
                    api_key=api_key,
                )
                rows.append(asdict(Correction(strategy, speed, seconds, read_after)))
    return pd.DataFrame(rows, columns=["strategy", "tps", "seconds", "read_after"])


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per speed: each strategy's median seconds, and how many times longer waiting and
    resending take than steering (medians of runs measured side by side)."""
    rows = []
    for speed, group in runs.groupby("tps", sort=True):
        median = {s: statistics.median(group.loc[group["strategy"] == s, "seconds"]) for s in STRATEGIES}
        rows.append(
            {
                "tps": speed,
                **{f"{s}_s": median[s] for s in STRATEGIES},
                "wait_over_steer": median["wait"] / median["steer"],
                "resend_over_steer": median["resend"] / median["steer"],
            }
        )
    return pd.DataFrame(rows)
