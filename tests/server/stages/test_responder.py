"""Every path runs the pipeline's stages: a response, a compaction pass, and each segment of an
appended rollout call the same stages of the server's ``Pipeline``, so a change to a stage reaches
them all.

The server runs in this process (uvicorn on a loopback socket, in a thread), with each stage of
its ``Pipeline`` wrapped to count its calls; real clients drive it over the socket: the
official SDK for compaction, labkit's agent loop (``Rollout``) for the appended rollout (over the
SDK's beta connection, and over the prototype's wire). The spans the server reports for those
responses come from the same functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from openai import OpenAI

from labkit.api.stages import Stage
from labkit.client.agent import Rollout
from labkit.scenarios import synthetic
from labkit.server.app import ServerConfig, create_app
from tests.helpers import READ_FILE_TOOL, served_in_thread, server_spans

MODEL = "labkit-spark"
# The inference stages a segment calls by name; the others from validation on are the runner's
# (``Pipeline.stages``). The door's come before a response exists, the downlink with its events.
INFERENCE = {Stage.QUEUE: "queue", Stage.PREFILL: "prefill", Stage.DECODE: "decode"}
STAGES = list(Stage)[list(Stage).index(Stage.VALIDATION) :]
STAGES.remove(Stage.DOWNLINK)


def counted(name: str, stage: Callable[..., Any], calls: Counter[str]) -> Callable[..., Any]:
    """``stage``, counting its calls (what it returns, a coroutine or a context manager, unchanged)."""

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return stage(*args, **kwargs)

    return counting


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Counter[str]]]:
    """The app with counted stages, served on loopback; its base URL and the counts."""
    calls: Counter[str] = Counter()
    db = tmp_path_factory.mktemp("stages") / "labkit.db"
    app = create_app(ServerConfig(db=str(db), profile="local"))
    with served_in_thread(app) as url:
        pipeline = app.state.pipeline  # built as the server started
        assert set(pipeline.stages) == set(STAGES) - set(INFERENCE)
        for stage in list(pipeline.stages):
            pipeline.stages[stage] = counted(stage, pipeline.stages[stage], calls)
        for stage, name in INFERENCE.items():
            setattr(pipeline, name, counted(stage, getattr(pipeline, name), calls))
        yield f"{url}v1", calls


def ran(calls: Counter[str], during: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    """What ``during()`` returns, and the stage calls it caused."""
    before = Counter(calls)
    result = during()
    return result, calls - before


def test_a_response_runs_every_stage_once(served: tuple[str, Counter[str]]) -> None:
    base_url, calls = served
    with OpenAI(base_url=base_url, api_key="sk-labkit-test", max_retries=0) as client:
        _, stages = ran(calls, lambda: client.responses.create(model=MODEL, input="Hi."))
    # The sprint (the HTTP default) has no intermediary hop: its plan skips the stage, which is not called.
    assert stages == Counter(s for s in STAGES if s is not Stage.INTERMEDIARY)


def test_a_compaction_pass_runs_the_pipelines_stages(served: tuple[str, Counter[str]]) -> None:
    base_url, calls = served
    with OpenAI(base_url=base_url, api_key="sk-labkit-test", max_retries=0) as client:
        first = client.responses.create(
            model=MODEL, input="Find the handler.", tools=[READ_FILE_TOOL], tool_choice="required"
        )
        call_id = first.output[0].model_dump()["call_id"]
        answer = {"type": "function_call_output", "call_id": call_id, "output": "def handler(): ..."}
        compacted, stages = ran(
            calls,
            lambda: client.responses.compact(model=MODEL, previous_response_id=first.id, input=[answer]),
        )
    assert stages == Counter(("validation", "hydration", "render", "routing", "queue", "prefill", "decode"))
    spans = server_spans(base_url, compacted.id)
    pass_stages = ["validation", "hydration", "render", "routing", "queue", "prefill", "decode"]
    assert [s["stage"] for s in spans] == ["connect", "uplink", "auth", *pass_stages]
    hydration, render = spans[4], spans[5]
    assert hydration["detail"]["source"] == "store"  # the stage's own record, as for a create
    assert render["detail"]["cache"] in ("miss", "render_cache")  # the sprint's render cache consulted


@pytest.mark.parametrize("design", ["appended", "appended+prototype_wire"])
def test_each_appended_segment_runs_the_pipelines_stages(
    served: tuple[str, Counter[str]], design: str
) -> None:
    """Over either wire: the SDK's beta (``response.inject``) or the prototype's (``response.append``)."""
    base_url, calls = served
    scenario = synthetic(turns=4, output_tokens=20, tool_tokens=50, instruction_tokens=100)
    rollout, stages = ran(calls, lambda: Rollout.run(base_url, design, scenario, model=MODEL))
    assert len({record.response_id for record in rollout.records}) == 1  # one response
    segments = scenario.turns
    for stage in ("validation", "input_safety", "render", "queue", "prefill", "decode"):
        assert stages[stage] == segments, stage
    for stage in ("hydration", "routing", "output_safety", "retain", "billing"):
        assert stages[stage] == 1, stage
    assert stages["storage"] == 0  # the agent loop's requests are not stored: the plan runs no storage
    renders = [s for s in rollout.spans[rollout.records[0].response_id] if s["stage"] == "render"]
    assert [s["detail"]["cache"] for s in renders][1:] == ["response"] * (segments - 1)
