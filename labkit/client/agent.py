"""The agent loop: the model picks an action, the client runs the tool, the result goes back.

``run_rollout`` runs a scenario over one design's transport and yields a
``TurnRecord`` as each turn completes (for live plots); ``Rollout`` collects
them, fetches the server's spans afterwards (so fetching does not slow the
rollout) and turns everything into one tidy DataFrame.

    with LabkitServer() as server:
        rollout = Rollout.run(server.base_url, "websocket", "fix-failing-test")
        frame = rollout.frame()
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from labkit.api.extensions import SCENARIO_KEY, TRACES_PATH
from labkit.api.items import Item, replayable
from labkit.api.owners import NAME_KEY
from labkit.client.records import ToolRun, TurnRecord
from labkit.client.room import client_key
from labkit.client.room import learner_name as learner_name_of
from labkit.client.sandbox import Sandbox
from labkit.client.tools import TOOL_SPECS, run_tool
from labkit.client.transports import Transport, TurnFailed, TurnRequest, TurnResult, open_transport
from labkit.paths import default_data_dir
from labkit.scenarios import DEFAULT_SCENARIO, Scenario, load_scenario
from labkit.text.passage import text_of_tokens

if TYPE_CHECKING:
    import pandas as pd

MAX_TURNS = 100
DEFAULT_MODEL = "labkit-spark"  # the fast coding model (1,000 tokens/s): what a rollout asks for unless told


class Toolbox:
    """The tools a scenario's calls run: real tools on a sandbox copy, the synthetic ``fetch``,
    or a replay's recorded outputs (returned in call order, not executed).

        tools = Toolbox(load_scenario("fix-failing-test", data_dir))
        print(tools.run("read_file", '{"path": "tally/tax.py"}'))
        tools.close()                      # removes the sandbox copy
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.sandbox = Sandbox(scenario.repo) if scenario.repo else None
        self.specs = TOOL_SPECS if scenario.repo else scenario.tools
        self.recorded = scenario.tool_outputs.open(encoding="utf-8") if scenario.tool_outputs else None

    def run(self, name: str, arguments: str) -> str:
        if self.recorded is not None:
            line = self.recorded.readline()  # one output at a time: a long replay is never loaded whole
            return json.loads(line) if line else ""
        if self.sandbox is not None:
            return run_tool(self.sandbox, name, arguments)
        return text_of_tokens(self.scenario.params.get("tool_tokens", 0))

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        if self.recorded is not None:
            self.recorded.close()


def run_rollout(
    base_url: str,
    design: str,
    scenario: Scenario,
    *,
    model: str = DEFAULT_MODEL,
    api_key: str | None = None,
    fresh_connection: bool = False,
    prompt_cache_key: bool = True,
    tool_seconds: float = 0.0,
    reconnects: Collection[int] = (),
    learner_name: str | None = None,
) -> Iterator[TurnRecord]:
    """Run the scenario's rollout over the design's transport; yield each turn as it completes.

    A per-rollout session line heads the instructions, so no rollout reuses
    another's prefix cache: each design starts cold, as a new session would.
    ``tool_seconds`` makes every tool call take at least that long (a what-if's slower tools).
    ``reconnects``: the turns (0-based) before which a WebSocket client loses its connection and
    opens a new one, sending the whole history (the what-if lab's reconnect rate).
    ``learner_name`` (else ``$LABKIT_NAME``) goes with every request, for an instructor's view.
    """
    session = uuid.uuid4().hex[:12]
    metadata = {SCENARIO_KEY: scenario.name}
    name = learner_name_of(learner_name)  # checked before any request: a bad name is one sentence
    if name is not None:
        metadata[NAME_KEY] = name
    instructions = f"Session {session}.\n\n{scenario.instructions}"
    with ExitStack() as stack:
        toolbox = Toolbox(scenario)
        stack.callback(toolbox.close)
        key = api_key or client_key()
        transport = open_transport(design, base_url, key, fresh_connection=fresh_connection)
        stack.callback(transport.close)
        history: list[Item] = [{"type": "message", "role": "user", "content": scenario.user}]
        new = list(history)
        for turn in range(max(MAX_TURNS, scenario.turns)):  # a long replay plays all its turns
            request = TurnRequest(
                model=model,
                instructions=instructions,
                tools=toolbox.specs,
                history=history,
                new=new,
                metadata=metadata,
                prompt_cache_key=f"labkit-{session}" if prompt_cache_key else None,
                reconnect=turn in reconnects,
            )
            result = _turn_or_resend(transport, request)
            record = _record(design, turn, result)
            outputs = [replayable(item) for item in result.output]
            new = []
            for item in outputs:
                if item["type"] == "function_call":
                    start = time.perf_counter()
                    text = toolbox.run(item["name"], item["arguments"])
                    # a what-if's slower tool: the call takes at least tool_seconds
                    time.sleep(max(0.0, start + tool_seconds - time.perf_counter()))
                    record.tools.append(ToolRun(item["name"], start, time.perf_counter(), len(text)))
                    new.append({"type": "function_call_output", "call_id": item["call_id"], "output": text})
            history = history + outputs + new
            yield record
            if not new:
                return


def _turn_or_resend(transport: Transport, request: TurnRequest) -> TurnResult:
    """The turn; on a socket whose cache missed the previous response (``store=false``: nothing
    else holds it), the whole conversation again on a new socket, as a client must. The turn
    then counts from the first attempt: a cache that misses costs its client that round trip.
    (A learner's connection cache that misses, exercise 3 of notebook 03, is paid for here.)"""
    started = time.perf_counter()
    try:
        return transport.turn(request)
    except TurnFailed as failed:
        if failed.code != "previous_response_not_found" or request.reconnect:
            raise
    result = transport.turn(replace(request, reconnect=True))
    return replace(result, sent=started, build=None)


def fetch_spans(
    base_url: str, response_ids: list[str], api_key: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The server's spans of each response (``GET /v1/labkit/traces``), as the key that made it sees them.

        spans = fetch_spans(server.base_url, [response.id], api_key="sk-local")[response.id]
    """
    headers = {"Authorization": f"Bearer {api_key or client_key()}"}
    found = {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        for response_id in response_ids:
            reply = http.get(TRACES_PATH, params={"response_id": response_id})
            reply.raise_for_status()
            found[response_id] = reply.json()["data"]
    return found


def _record(design: str, turn: int, result: TurnResult) -> TurnRecord:
    return TurnRecord(
        design=design,
        turn=turn,
        response_id=result.response_id,
        sent=result.sent,
        build=result.build,
        first_delta=result.first_delta,
        last_delta=result.last_delta,
        done=result.done,
        calls=[i["name"] for i in result.output if i["type"] == "function_call"],
        usage=result.usage,
    )


@dataclass
class Rollout:
    """One rollout of a scenario over one design: the client's turns and the server's spans.

    ``Rollout.run`` plays it to the end; ``play`` yields each turn as it
    completes (for a live plot) and fetches the server's spans once the last
    turn is done, so fetching them does not slow the rollout down.

        rollout = Rollout.run(server.base_url, "websocket", "fix-failing-test")
        rollout.frame()                      # one row per span, server and client

        rollout = Rollout("naive")
        for record in rollout.play(server.base_url, "fix-failing-test"):
            print(record.turn, record.ttft)
    """

    design: str
    records: list[TurnRecord] = field(default_factory=list)
    spans: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def run(
        cls,
        base_url: str,
        design: str,
        scenario: str | Scenario = DEFAULT_SCENARIO,
        *,
        on_turn: Callable[[TurnRecord], None] | None = None,
        **options: Any,
    ) -> Rollout:
        """Play the whole rollout; ``on_turn`` is called with each turn as it completes."""
        rollout = cls(design)
        for record in rollout.play(base_url, scenario, **options):
            if on_turn is not None:
                on_turn(record)
        return rollout

    def play(
        self,
        base_url: str,
        scenario: str | Scenario = DEFAULT_SCENARIO,
        *,
        data_dir: Path | None = None,
        api_key: str | None = None,
        watch: bool = False,
        **options: Any,
    ) -> Iterator[TurnRecord]:
        """Run the rollout, yielding each ``TurnRecord`` as its turn completes (and keeping it).

        ``watch``: also fetch each turn's server spans as soon as it completes, so ``frame()``
        can be drawn turn by turn. Whatever the caller does between two turns (fetching spans,
        drawing) is recorded as ``observed`` and left out of the metrics.
        ``options``: ``model``, ``fresh_connection``, ``prompt_cache_key``, ``reconnects``,
        ``learner_name`` (see ``run_rollout``).
        """
        if isinstance(scenario, str):
            scenario = load_scenario(scenario, data_dir or default_data_dir())
        api_key = api_key or client_key()
        for record in run_rollout(base_url, self.design, scenario, api_key=api_key, **options):
            held = time.perf_counter()
            self.records.append(record)
            if watch:
                self.fetch_spans(base_url, api_key, [record.response_id])
            yield record
            record.observed = (held, time.perf_counter())
        self.fetch_spans(base_url, api_key)

    def fetch_spans(
        self, base_url: str, api_key: str | None = None, response_ids: list[str] | None = None
    ) -> None:
        """The server's spans of these responses (default: every turn's), from the traces endpoint."""
        wanted = response_ids or list(dict.fromkeys(r.response_id for r in self.records))
        self.spans.update(fetch_spans(base_url, wanted, api_key))

    def frame(self) -> pd.DataFrame:
        """One tidy DataFrame of the rollout's spans, server and client (see ``labkit.client.frame``)."""
        from labkit.client.frame import rollout_frame  # pandas, only when a frame is asked for

        return rollout_frame(self.design, self.records, self.spans)


def take_turns(
    base_url: str,
    designs: Sequence[str],
    scenario: str | Scenario = DEFAULT_SCENARIO,
    *,
    elsewhere: Mapping[str, tuple[str, str]] | None = None,
    **options: Any,
) -> Iterator[dict[str, Rollout]]:
    """One rollout per design of the same task, taking turns: every design plays turn *t* before
    any plays turn *t* + 1. Yields the rollouts (by design) after each round.

    A busy machine gets busier or quieter as it likes; run one design after another and the later
    one meets another machine. Taking turns, each turn of one design runs next to the same turn
    of the others, so a change falls on all of them alike and a turn-by-turn comparison
    (``labkit.analysis.paired``) sees the designs, not the moment. While one design plays, the
    others wait between two turns, which ``Rollout.play`` leaves out of their metrics (``observed``).

        for rollouts in take_turns(server.base_url, ["naive", "websocket"], watch=True):
            plot.update({d: r.frame() for d, r in rollouts.items()})

    ``elsewhere`` names rollouts that run on another server: a label of ``designs`` mapped to
    its design and that server's base URL, e.g. a learner's connection cache beside labkit's:

        take_turns(server.base_url, ["sprint", "websocket", "yours"], elsewhere={"yours":
                   ("websocket", mine.base_url)})
    """
    where = {label: (label, base_url) for label in designs} | dict(elsewhere or {})
    rollouts = {label: Rollout(where[label][0]) for label in designs}
    playing = {
        label: rollout.play(where[label][1], scenario, **options) for label, rollout in rollouts.items()
    }
    while playing:
        for design, turns in list(playing.items()):
            if next(turns, None) is None:
                del playing[design]
        yield rollouts
