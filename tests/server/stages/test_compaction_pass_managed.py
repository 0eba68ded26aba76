"""Server-side compaction (``context_management``) for a client that chains statelessly.

The Vercel AI SDK (``@ai-sdk/openai`` 4, ``providerOptions.openai.contextManagement``) runs its
tool loop by sending the whole history every step and appends each response's output items to
it, the compaction item included: by reference (``item_reference``, ``store: true``, its
default) or inline (``store: false``). The API's compaction guide says to do exactly that for
stateless chaining, the compaction item carrying what the next window needs. These tests send
the AI SDK's requests as ``.ci/check_real_clients.py`` recorded them (roles without ``type``, a
``system`` message, calls without ``id``), over real HTTP to a real server: the window must
shrink once compacted, and the model must still call its tools at most three times for the
user's message, those the compaction item stands for included, and then answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from tests.helpers import API_KEY, REPO, auth_headers, by_stage, server_spans

MODEL = "labkit-spark"
THRESHOLD = 2000  # tokens: crossed once the model has read two tool results, not after one
TOOL_OUTPUT = (REPO / "data" / "sample_repo" / "tally" / "invoice.py").read_text()  # about 1.3k tokens
MAX_STEPS = 12  # the AI SDK's step cap in the check; the model needs 4 steps
# The tool definitions as the AI SDK sends them (zod's JSON schema, strict off).
TOOLS = [
    {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        "strict": False,
    }
    for name, description in [("list_files", "List a folder."), ("read_file", "Read a file.")]
]


@pytest.fixture
def http(server: LabkitServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, headers=auth_headers(), timeout=30) as h:
        yield h


def run_tool_loop(http: httpx.Client, store: bool) -> list[dict[str, Any]]:
    """The AI SDK's loop: each step sends the history so far, then its output items and the tool
    results are appended to it, until a step answers in text. Returns every step's response."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding assistant. Use the tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "Which module computes tax?"}]},
    ]
    settings: dict[str, Any] = {} if store else {"store": False, "include": ["reasoning.encrypted_content"]}
    steps = []
    for _ in range(MAX_STEPS):
        reply = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": history,
                "tools": TOOLS,
                "tool_choice": "auto",
                "prompt_cache_key": f"vercel-compaction-{store}",
                "context_management": [{"type": "compaction", "compact_threshold": THRESHOLD}],
                **settings,
            },
        )
        assert reply.status_code == 200, reply.text
        response = reply.json()
        steps.append(response)
        calls = []
        for item in response["output"]:
            if item["type"] == "compaction" and store:
                history.append({"type": "item_reference", "id": item["id"]})
            elif item["type"] == "compaction":
                history.append({k: item[k] for k in ("type", "id", "encrypted_content")})
            elif item["type"] == "function_call":
                history.append({k: item[k] for k in ("type", "call_id", "name", "arguments")})
                calls.append(item["call_id"])
        if not calls:
            return steps
        history += [{"type": "function_call_output", "call_id": c, "output": TOOL_OUTPUT} for c in calls]
    pytest.fail(f"no answer in {MAX_STEPS} steps: {[[o['type'] for o in r['output']] for r in steps]}")


@pytest.mark.parametrize("store", [True, False], ids=["by-reference", "inline"])
def test_a_stateless_client_gets_a_shorter_window_once_compacted(
    server: LabkitServer, http: httpx.Client, store: bool
) -> None:
    steps = run_tool_loop(http, store)
    compacted = [i for i, r in enumerate(steps) if r["output"][0]["type"] == "compaction"]
    # Compacted once: the history sent after it renders as the compacted window, which stays
    # under the threshold, instead of compacting again at every step.
    assert len(compacted) == 1, [[o["type"] for o in r["output"]] for r in steps]
    at = compacted[0]
    assert at < len(steps) - 1  # the task went on after it
    # The step after read the compacted window and its own new items: fewer input tokens than
    # the compacting step read before compacting (its usage counts both of that step's prompts).
    render = by_stage(server_spans(server.base_url, steps[at + 1]["id"], API_KEY))["render"]
    assert render["detail"]["prompt_tokens"] < THRESHOLD
    assert steps[at + 1]["usage"]["input_tokens"] < steps[at]["usage"]["input_tokens"]


@pytest.mark.parametrize("store", [True, False], ids=["by-reference", "inline"])
def test_calls_behind_a_compaction_still_count_toward_the_three(http: httpx.Client, store: bool) -> None:
    steps = run_tool_loop(http, store)
    calls = [o for r in steps for o in r["output"] if o["type"] == "function_call"]
    # Three calls for the user's message, the two the compaction item stands for included,
    # then an answer (README: "up to 3 times per user message, then answers in text").
    assert len(calls) == 3
    assert [o["type"] for o in steps[-1]["output"]] == ["message"]
