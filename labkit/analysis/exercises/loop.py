"""Exercise 1, the stateless loop: the learner writes the agent loop, and the server checks it.

The loop takes what every turn sends unchanged (``request``: model, instructions, tools,
metadata, ``store=False``), the person's ``message`` and ``run_tool(name, arguments) -> str``,
and returns the responses, one per turn. ``reference_loop`` is labkit's. ``check_loop`` plays
both on the same task against the same server, side by side, records every request and
response on the wire (an httpx hook of the official SDK's client: no second path for the
learner), and compares them turn by turn: the turns, the tool calls, the items sent, the input
tokens the server counted.

    mine = lab.exercises.mine_or_reference(agent_loop, lab.exercises.reference_loop,
                                          "agent loop", probe=lab.exercises.probe_loop)
    lab.exercises.check_loop(mine, server)
    # Checked your agent loop: right on every rule (19 turns; ...).
    # Measured side by side on this server, tools included: your loop took 3.1 s for 19 turns, ...
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from openai import DefaultHttpxClient, OpenAI
from openai.types.responses import Response

from labkit.analysis.exercises.common import Verdict
from labkit.api.event_types import TERMINAL_EVENTS
from labkit.api.extensions import SCENARIO_KEY
from labkit.api.owners import NAME_KEY
from labkit.client.agent import DEFAULT_MODEL, Toolbox
from labkit.client.room import learner_name
from labkit.engine.render import encode_block, item_block
from labkit.paths import default_data_dir
from labkit.scenarios import DEFAULT_SCENARIO, Scenario, load_scenario

RunTool = Callable[[str, str], str]
WHAT = "agent loop"
REQUEST_SECONDS = 30.0  # one turn of a 19-turn task takes well under a second: 30 s is a stuck server


class AgentLoop(Protocol):
    def __call__(
        self, client: OpenAI, request: dict[str, Any], message: str, run_tool: RunTool
    ) -> list[Response]: ...


def reference_loop(
    client: OpenAI, request: dict[str, Any], message: str, run_tool: RunTool
) -> list[Response]:
    """labkit's stateless agent loop: the whole history every turn, until the model answers in text.

    responses = reference_loop(client, request, "The test suite is failing.", tools.run)
    len(responses), responses[-1].output_text[:6]      # (19, 'Fixed.')
    """
    history: list[Any] = [{"role": "user", "content": message}]
    responses = []
    while True:
        response = client.responses.create(input=history, **request)
        responses.append(response)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return responses
        history += response.output  # the model's message and calls, as the next turn's input
        for call in calls:
            output = run_tool(call.name, call.arguments)
            history.append({"type": "function_call_output", "call_id": call.call_id, "output": output})


def probe_loop(loop: AgentLoop) -> object:
    """Call ``loop`` the cheapest way that reaches its body (for ``mine_or_reference``): a
    skeleton raises ``NotImplementedError`` at once, a written loop fails on the empty client.

    >>> def skeleton(client, request, message, run_tool): raise NotImplementedError
    >>> from labkit.analysis.exercises.common import is_skeleton
    >>> is_skeleton(lambda: probe_loop(skeleton)), is_skeleton(lambda: probe_loop(reference_loop))
    (True, False)
    """
    return loop(None, {}, "", lambda name, arguments: "")  # type: ignore[arg-type]


# ---------------------------------------------------------------- what the wire saw


@dataclass
class Exchange:
    """One request a loop sent and what came back, as the server sent it."""

    body: dict[str, Any]
    sent: float
    status: int = 0
    reply: dict[str, Any] = field(default_factory=dict)  # the response, or the error's body
    received: float = 0.0

    @property
    def items(self) -> list[dict[str, Any]]:
        sent = self.body.get("input", [])
        return [{"type": "message", "role": "user", "content": sent}] if isinstance(sent, str) else sent

    @property
    def calls(self) -> list[tuple[str, str]]:
        output = self.reply.get("output", [])
        return [(i["name"], i["arguments"]) for i in output if i["type"] == "function_call"]

    @property
    def input_tokens(self) -> int | None:
        return (self.reply.get("usage") or {}).get("input_tokens")

    @property
    def refused(self) -> str | None:
        """The server's error message, when it refused the request."""
        if self.status < 400:
            return None
        return str((self.reply.get("error") or {}).get("message", f"status {self.status}"))


class TooManyRequests(RuntimeError):
    """The loop went on past any plausible end: the recorder stops it."""


@dataclass
class LoopRun:
    """Everything one loop did on the wire, what it returned, and how it ended."""

    exchanges: list[Exchange] = field(default_factory=list)
    returned: object = None
    tool_outputs: list[str] = field(default_factory=list)  # what run_tool returned, call by call
    error: BaseException | None = None
    cap: int = 0

    @property
    def turns(self) -> int:
        return len(self.exchanges)

    @property
    def seconds(self) -> float:
        """First request sent → last reply read (tools and the client's work included)."""
        if not self.exchanges:
            return 0.0
        return max(e.received for e in self.exchanges) - self.exchanges[0].sent

    def _request(self, request: httpx.Request) -> None:
        if request.method != "POST" or not request.url.path.endswith("/responses"):
            return
        if len(self.exchanges) >= self.cap:
            raise TooManyRequests(f"stopped after {self.cap} requests")
        self.exchanges.append(Exchange(json.loads(request.content or b"{}"), time.perf_counter()))

    def _response(self, response: httpx.Response) -> None:
        if response.request.method != "POST" or not response.request.url.path.endswith("/responses"):
            return
        response.read()  # the SDK reads the body again from memory, streamed or not
        exchange = self.exchanges[-1]
        exchange.status, exchange.received = response.status_code, time.perf_counter()
        exchange.reply = _reply_of(response)


def _reply_of(response: httpx.Response) -> dict[str, Any]:
    """The response object of a JSON reply or an SSE stream's terminal event (or the error body)."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        try:
            return dict(response.json())
        except ValueError:
            return {}
    for line in response.text.splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event.get("type") in TERMINAL_EVENTS:
                return dict(event["response"])
            if event.get("type") == "error":
                return {"error": event.get("error", event)}
    return {}


def play(
    loop: AgentLoop,
    base_url: str,
    api_key: str,
    scenario: Scenario,
    model: str = DEFAULT_MODEL,
) -> LoopRun:
    """Run ``loop`` on the scenario's task with its real tools (a fresh sandbox), recording the wire.

    Each run's instructions open with their own session number (twelve digits: the same token
    count every time), so no run reuses another's prefix cache and every run sends as many tokens.
    """
    run = LoopRun(cap=2 * scenario.turns + 5)
    metadata = {SCENARIO_KEY: scenario.name}
    name = learner_name()
    if name is not None:
        metadata[NAME_KEY] = name
    session = f"{random.randrange(10**12):012d}"
    tools = Toolbox(scenario)
    request = {
        "model": model,
        "instructions": f"Session {session}.\n\n{scenario.instructions}",
        "tools": tools.specs,
        "metadata": metadata,
        "store": False,
    }

    def run_tool(name: str, arguments: str) -> str:
        output = tools.run(name, arguments)
        run.tool_outputs.append(output)
        return output

    hooks = {"request": [run._request], "response": [run._response]}
    client = OpenAI(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=REQUEST_SECONDS,
        http_client=DefaultHttpxClient(event_hooks=hooks),
    )
    try:
        run.returned = loop(client, dict(request), scenario.user, run_tool)
    except Exception as exc:  # the learner's loop failed: the verdict says how, in one sentence
        run.error = exc
    finally:
        client.close()
        tools.close()
    return run


# ---------------------------------------------------------------- the rules


def _kinds(items: list[dict[str, Any]]) -> list[str]:
    return [str(i.get("type", "message")) for i in items]


def _items_broken(turn: int, mine: Exchange, theirs: Exchange, ran: list[str]) -> str | None:
    """What the learner's request of this turn got wrong against labkit's, or None.
    ``ran``: what the learner's ``run_tool`` returned, every call of the run.
    """
    if mine.body.get("previous_response_id") or mine.body.get("store", True) is not False:
        return (
            f"turn {turn} asked the server to keep state (store or previous_response_id): "
            "a stateless loop sends store=False and the whole history"
        )
    got, want = _kinds(mine.items), _kinds(theirs.items)
    if got != want:
        said = f"turn {turn} sent {len(got)} items where labkit's loop sent {len(want)}"
        if not any(item.get("role") == "user" for item in mine.items):
            why = (
                "your loop sent only the new items, but stateless HTTP remembers nothing: "
                "every request carries the whole history"
            )
        elif got.count("function_call") < want.count("function_call"):
            why = "your loop dropped the function call before its output"
        elif got.count("message") < want.count("message"):
            why = "your loop dropped the model's message: append every output item, not only the calls"
        elif got.count("function_call_output") < want.count("function_call_output"):
            why = "your loop did not send back an output for every function call"
        else:
            why = "the history is not the one labkit's loop builds"
        return f"{said}: {why}"
    for item in mine.items:
        if item.get("type") == "function_call_output" and item.get("output") not in ran:
            if not item.get("output"):
                return f"turn {turn} sent an empty tool output: run the tool and send back what it returned"
            return f"turn {turn} sent a tool output that is not the tool's: send back what run_tool returned"
    return None


def _tokens(item: dict[str, Any]) -> int:
    return len(encode_block(*item_block(item)))


def _expected_tokens(mine: Exchange, theirs: Exchange) -> int | None:
    """The input tokens the server counted for labkit's request, shifted by what the learner's
    request rightly holds of its own: the call ids (the server makes them at random, and an id's
    tokens vary) and the tools' outputs (a test run's timing, say). Each item is tokenized on its
    own (labkit.engine.render), so the shift is exact: any other difference is the learner's.
    """
    if theirs.input_tokens is None:
        return None
    shift = 0
    for got, want in zip(mine.items, theirs.items, strict=False):
        if "call_id" in got and "call_id" in want:
            same = {**got, "call_id": want["call_id"]}
            if "output" in got and "output" in want:
                same["output"] = want["output"]
            shift += _tokens(got) - _tokens(same)
    return theirs.input_tokens + shift


def _duration(seconds: float) -> str:
    """A measured time, as a person reads it.

    >>> _duration(3.14159), _duration(0.2718), _duration(0.0004)
    ('3.1 s', '272 ms', 'under 1 ms')
    """
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.001 else "under 1 ms"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def compare(mine: LoopRun, labkit: LoopRun, what: str = WHAT) -> Verdict:
    """The rules, turn by turn: each broken one in a sentence saying what it means."""
    broken: list[str] = []
    for turn, (got, want) in enumerate(zip(mine.exchanges, labkit.exchanges, strict=False)):
        wrong = _items_broken(turn, got, want, mine.tool_outputs)
        if wrong is None and got.refused is not None:
            wrong = f"turn {turn}: the server refused your request ({got.refused})"
        if wrong is None and got.calls != want.calls:
            asked = ", ".join(name for name, _ in got.calls) or "no tool"
            wanted = ", ".join(name for name, _ in want.calls) or "no tool"
            wrong = (
                f"turn {turn}: the model asked for {asked} where it asked labkit's loop for {wanted}: "
                "the history your loop sent led it elsewhere"
            )
        if wrong is None and got.input_tokens != _expected_tokens(got, want):
            wrong = (
                f"turn {turn}: the server counted {got.input_tokens or 0:,} input tokens where labkit's "
                f"loop's request, call ids aside, had {_expected_tokens(got, want):,}"
            )
        if wrong is not None:
            broken.append(wrong)
            break  # later turns follow from this one
    if not broken:
        if mine.turns > labkit.turns:  # checked first: the recorder's stop is an error in the loop
            broken.append(
                f"your loop went on after the model answered in text (turn {labkit.turns - 1}): "
                "stop when a response has no function call"
            )
        elif mine.error is not None:
            where = f"after {_plural(mine.turns, 'request')}" if mine.turns else "before its first request"
            broken.append(f"your loop raised {type(mine.error).__name__} {where}: {mine.error}")
        elif mine.turns < labkit.turns:
            broken.append(
                f"your loop stopped after {_plural(mine.turns, 'turn')} where labkit's took {labkit.turns}: "
                "it must run every function call and send the result back, until the model answers in text"
            )
    if not broken:
        ids = [e.reply.get("id") for e in mine.exchanges]
        returned = mine.returned
        if not isinstance(returned, list) or [getattr(r, "id", None) for r in returned] != ids:
            shown = type(returned).__name__ if not isinstance(returned, list) else f"{len(returned)} items"
            broken.append(f"your loop returned {shown}: return the responses, one per turn, in order")
    kept = [
        f"{_plural(labkit.turns, 'turn')}",
        "the same tool calls",
        "the whole history every turn",
        "the same input tokens on every turn",
    ]
    return Verdict(what, kept=[] if broken else kept, broken=broken)


@dataclass
class LoopCheck:
    """The check's verdict, and both loops' runs on the same server (for the measured line)."""

    verdict: Verdict
    mine: LoopRun
    labkit: LoopRun
    stand_in: bool = False  # the learner's loop is still the skeleton: labkit's reference ran for it

    @property
    def right(self) -> bool:
        return self.verdict.right

    @property
    def measured(self) -> str:
        """Both loops' end to end, as measured, in one sentence true for any values."""
        mine, labkit = self.mine, self.labkit
        theirs = f"labkit's {_duration(labkit.seconds)} for {_plural(labkit.turns, 'turn')}"
        if not mine.turns:
            return f"Measured on this server, tools included: {theirs}; your loop sent no request."
        yours = "the reference in your loop's place" if self.stand_in else "your loop"
        return (
            f"Measured side by side on this server, tools included: {yours} took "
            f"{_duration(mine.seconds)} for {_plural(mine.turns, 'turn')}, {theirs} (one run each: "
            "two runs of one loop can differ by a few tenths of a second)."
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        self.verdict._repr_pretty_(printer, cycle)
        printer.text("\n" + self.measured)

    def __str__(self) -> str:
        return f"{self.verdict}\n{self.measured}"


def check_loop(
    mine: AgentLoop,
    server: Any,
    scenario: str | Scenario = DEFAULT_SCENARIO,
    *,
    model: str = DEFAULT_MODEL,
) -> LoopCheck:
    """Run ``mine`` and labkit's loop side by side on the same task against ``server`` and compare them.

    ``server`` is anything with ``base_url`` and ``api_key`` (``lab.server()``).

        check = check_loop(agent_loop, server)
        check.verdict.sentence     # 'Checked your agent loop: right on every rule (19 turns; ...).'
    """
    if isinstance(scenario, str):
        scenario = load_scenario(scenario, default_data_dir())
    theirs: list[LoopRun] = []
    # labkit's loop in a thread, the learner's here: side by side on the same server, and an
    # interrupt (Kernel > Interrupt) reaches the learner's loop, which is the one that may hang
    beside = threading.Thread(
        target=lambda: theirs.append(play(reference_loop, server.base_url, server.api_key, scenario, model)),
        daemon=True,
    )
    beside.start()
    run = play(mine, server.base_url, server.api_key, scenario, model)
    beside.join()
    labkit = theirs[0]
    if labkit.error is not None:
        raise labkit.error  # the server itself is not answering: nothing to compare against
    stand_in = mine is reference_loop
    what = f"{WHAT} (labkit's reference in its place)" if stand_in else WHAT
    return LoopCheck(compare(run, labkit, what), run, labkit, stand_in)
