"""The ``openai-agents`` SDK, unmodified, runs an agent loop with a function tool against labkit.

labkit's generic policy calls offered function tools (schema-valid arguments) a bounded
number of times, then answers in text, so the runner must execute the tool, send its
output back, and finish on a text answer. Covered over HTTP (SSE) and over the SDK's
WebSocket transport, with and without ``previous_response_id`` chaining.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import agents
import httpx
from agents import Agent, ModelSettings, Runner, RunResult, function_tool
from agents.items import ToolCallItem, ToolCallOutputItem
from agents.models.openai_responses import OpenAIResponsesModel, OpenAIResponsesWSModel
from openai import AsyncOpenAI

from labkit.client.launcher import LabkitServer
from tests.helpers import API_KEY, server_spans

agents.set_tracing_disabled(True)

MODEL = "labkit-spark"


def make_agent(model: OpenAIResponsesModel, calls: list[tuple[int, int]]) -> Agent:
    @function_tool
    def add_numbers(a: int, b: int) -> str:
        """Add two integers and return the sum.

        Args:
            a: The first addend.
            b: The second addend.
        """
        calls.append((a, b))
        return f"The sum of {a} and {b} is {a + b}."

    return Agent(
        name="adder",
        instructions="Use the add_numbers tool, then report the result.",
        tools=[add_numbers],
        model=model,
        # store=True lets the HTTP transport chain on persisted responses.
        model_settings=ModelSettings(store=True),
    )


def check_result(result: RunResult, calls: list[tuple[int, int]]) -> None:
    # The runner executed the tool itself, with the arguments the model sampled.
    assert calls, "the runner never called the function tool"
    assert all(isinstance(a, int) and isinstance(b, int) for a, b in calls)
    tool_calls = [i for i in result.new_items if isinstance(i, ToolCallItem)]
    tool_outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert len(tool_calls) == len(calls) == len(tool_outputs)
    assert [o.output for o in tool_outputs] == [f"The sum of {a} and {b} is {a + b}." for a, b in calls]
    # ... and the loop ended on a text answer, after the tool results went back.
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert len(result.raw_responses) == len(calls) + 1
    last = result.raw_responses[-1].output
    assert [item.type for item in last] == ["message"]
    for response in result.raw_responses[:-1]:
        assert [item.type for item in response.output] == ["function_call"]
    ids = [r.response_id for r in result.raw_responses]
    assert all(isinstance(i, str) and i.startswith("resp_") for i in ids)
    assert len(set(ids)) == len(ids)


def fetch_response(server: LabkitServer, response_id: str) -> dict[str, Any]:
    reply = httpx.get(
        f"{server.base_url}/responses/{response_id}",
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def hydrate_source(server: LabkitServer, response_id: str) -> str | None:
    """Where labkit found the chained-on state for this response (from its trace spans)."""
    spans = [s for s in server_spans(server.base_url, response_id) if s["stage"] == "hydration"]
    return spans[0]["detail"].get("source") if spans else None


def test_runner_calls_function_tool_over_http(server: LabkitServer) -> None:
    calls: list[tuple[int, int]] = []

    async def main() -> RunResult:
        client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)
        try:
            model = OpenAIResponsesModel(model=MODEL, openai_client=client)
            return await Runner.run(make_agent(model, calls), "What is 2 + 3? Use the tool.", max_turns=8)
        finally:
            await client.close()

    result = asyncio.run(main())
    check_result(result, calls)
    # Without chaining, each turn replays the whole history: the last response saw every call.
    final = fetch_response(server, result.last_response_id)
    assert final["status"] == "completed"
    assert final["previous_response_id"] is None


def test_runner_chains_previous_response_id_over_http(server: LabkitServer) -> None:
    calls: list[tuple[int, int]] = []

    async def main() -> RunResult:
        client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)
        try:
            model = OpenAIResponsesModel(model=MODEL, openai_client=client)
            agent = make_agent(model, calls)
            return await Runner.run(
                agent, "What is 2 + 3? Use the tool.", max_turns=8, auto_previous_response_id=True
            )
        finally:
            await client.close()

    result = asyncio.run(main())
    check_result(result, calls)
    ids = [r.response_id for r in result.raw_responses]
    # Each turn after the first sent only the tool output and chained on the previous response.
    for previous, current in itertools.pairwise(ids):
        assert fetch_response(server, current)["previous_response_id"] == previous
        assert hydrate_source(server, current) == "store"


def run_over_websocket(server: LabkitServer, *, chain: bool) -> tuple[RunResult, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []

    async def main() -> RunResult:
        client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)
        model = OpenAIResponsesWSModel(model=MODEL, openai_client=client)
        try:
            return await Runner.run(
                make_agent(model, calls),
                "What is 2 + 3? Use the tool.",
                max_turns=8,
                auto_previous_response_id=chain,
            )
        finally:
            await model.close()
            await client.close()

    return asyncio.run(main()), calls


def test_runner_calls_function_tool_over_websocket(server: LabkitServer) -> None:
    result, calls = run_over_websocket(server, chain=False)
    check_result(result, calls)


def test_runner_chains_previous_response_id_over_websocket(server: LabkitServer) -> None:
    result, calls = run_over_websocket(server, chain=True)
    check_result(result, calls)
    ids = [r.response_id for r in result.raw_responses]
    for previous, current in itertools.pairwise(ids):
        assert fetch_response(server, current)["previous_response_id"] == previous
        # One connection, one response at a time: the connection cache serves each follow-up.
        assert hydrate_source(server, current) == "connection_cache"
