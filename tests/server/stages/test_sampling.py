"""The sampler stops for steering input on the response's own signal (``ResponseRun.stop``), at a
safe output boundary, and reads nothing else to know it: no connection, no job. Each test runs
one response through the pipeline in this process, with no socket, and sets the signal itself,
as the WebSocket layer does when its connection's rules accept a steer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from labkit.api.event_types import OUTPUT_TEXT_DELTA
from labkit.designs import compose
from labkit.engine.catalogue import load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.server.stages.pipeline import Pipeline
from labkit.server.stages.responder import prepare, respond
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.sampling import ends_sentence
from labkit.server.stores.billing import Ledger
from labkit.server.stores.database import Database
from labkit.server.stores.store import ResponseStore
from labkit.text.tokenizer import encode_text

ANSWER_TOKENS = 400
BODY = {"model": "labkit-spark", "input": f"Write {ANSWER_TOKENS} tokens.", "store": False}


def sampled(stop_after_deltas: int | None) -> tuple[ResponseRun, list[dict[str, Any]]]:
    """A long answer, its run's signal set after that many text deltas (None: never); the run and
    the events it sent."""

    async def scenario() -> tuple[ResponseRun, list[dict[str, Any]]]:
        database = Database(":memory:")
        profile = load_profile("local", default_data_dir())
        pipeline = Pipeline(load_catalogue(None), profile, ResponseStore(database), Ledger(database))
        run = ResponseRun(design=compose("websocket"), owner="key_a")
        events: list[dict[str, Any]] = []

        async def emit(event: dict[str, Any]) -> None:
            events.append(event)
            deltas = sum(e["type"] == OUTPUT_TEXT_DELTA for e in events)
            if stop_after_deltas is not None and deltas >= stop_after_deltas:
                run.stop.request()  # 0: at response.created, before sampling

        await prepare(pipeline, run, BODY)
        await respond(pipeline, run, emit)
        return run, events

    return asyncio.run(scenario())


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == OUTPUT_TEXT_DELTA)


def test_a_response_whose_signal_is_never_set_runs_to_its_end() -> None:
    run, _ = sampled(None)
    assert run.response["status"] == "completed" and run.produced == ANSWER_TOKENS
    assert not run.stop.requested


def test_the_sampler_stops_at_a_sentence_end_once_the_runs_signal_is_set() -> None:
    run, events = sampled(1)
    assert run.response["status"] == "incomplete"
    assert run.response["incomplete_details"] == {"reason": "steered"}
    assert 0 < run.produced < ANSWER_TOKENS
    text = text_of(events)
    assert ends_sentence(encode_text(text)[-1]), "it stops right after a token that ends a sentence"
    [decode] = [s for s in run.trace.spans if s.stage == "decode"]
    assert decode.detail["stopped"] == "steered" and decode.tokens == run.produced


def test_a_signal_set_before_sampling_stops_it_before_its_first_item() -> None:
    run, events = sampled(0)
    assert run.response["incomplete_details"] == {"reason": "steered"}
    assert run.produced == 0 and run.response["output"] == [] and text_of(events) == ""
