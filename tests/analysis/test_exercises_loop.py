"""Exercise 1, the stateless loop: learners' loops, right and wrong, checked through a real server.

Every loop here is a learner's: it gets the official SDK's client pointed at a ``labkit serve``
on loopback, and the check compares what that server saw of it with labkit's own loop. The
notebook's solution is read from notebook 01 itself, so the cell a learner opens is the one
proven right.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest

from labkit.analysis import exercises
from labkit.analysis.exercises import loop as exercise
from labkit.client.agent import run_rollout
from labkit.client.launcher import LabkitServer
from labkit.paths import default_data_dir
from labkit.scenarios import Scenario, load_scenario
from tests.helpers import REPO

NOTEBOOK = REPO / "notebooks" / "01_naive_stateless_loop.ipynb"
SOLUTION = re.compile(r"<summary>Solution.*?```python\n(.*?)```", re.DOTALL)


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as srv:  # no modeled hops: the rules, not the time
        yield srv


@pytest.fixture(scope="module")
def task() -> Scenario:
    return load_scenario("fix-failing-test", default_data_dir())


@pytest.fixture(scope="module")
def labkits(server: LabkitServer, task: Scenario) -> exercise.LoopRun:
    """labkit's loop on the task, once for the module: what every learner's run is compared with."""
    return exercise.play(exercise.reference_loop, server.base_url, server.api_key, task)


def verdict_of(loop: Any, server: LabkitServer, task: Scenario, labkits: exercise.LoopRun) -> str:
    return exercise.compare(exercise.play(loop, server.base_url, server.api_key, task), labkits).sentence


def notebook_solution() -> Any:
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    solutions = [m.group(1) for c in cells if c.cell_type == "markdown" for m in SOLUTION.finditer(c.source)]
    (code,) = solutions
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    return namespace["agent_loop"]


# ---------------------------------------------------------------- right loops


def test_the_notebooks_solution_is_right_on_every_rule(server: LabkitServer) -> None:
    check = exercises.check_loop(notebook_solution(), server)
    assert check.right, check.verdict.sentence
    assert check.verdict.sentence.startswith("Checked your agent loop: right on every rule (19 turns;")
    assert check.mine.turns == check.labkit.turns == 19
    assert "your loop took" in check.measured and "labkit's" in check.measured


def test_labkits_reference_plays_the_turns_of_labkits_naive_transport(
    server: LabkitServer, task: Scenario, labkits: exercise.LoopRun
) -> None:
    """The reference plays the turns of the loop the notebooks' naive rollouts run, call for call,
    and sends the histories the skeleton's docstring shows (1, 3, 5, 8 ... 40 items)."""
    records = list(run_rollout(server.base_url, "naive", task, api_key=server.api_key))
    assert [r.calls for r in records] == [[name for name, _ in e.calls] for e in labkits.exchanges]
    sizes = [len(e.items) for e in labkits.exchanges]
    assert sizes[:4] == [1, 3, 5, 8] and sizes[-1] == 40 and len(sizes) == 19


def test_a_streaming_loop_is_checked_on_the_same_wire(
    server: LabkitServer, task: Scenario, labkits: exercise.LoopRun
) -> None:
    def streaming(client: Any, request: dict[str, Any], message: str, run_tool: Any) -> list[Any]:
        history: list[Any] = [{"role": "user", "content": message}]
        responses = []
        while True:
            with client.responses.stream(input=history, **request) as stream:
                response = stream.get_final_response()
            responses.append(response)
            calls = [i for i in response.output if i.type == "function_call"]
            if not calls:
                return responses
            history += response.output
            for call in calls:
                output = run_tool(call.name, call.arguments)
                history.append({"type": "function_call_output", "call_id": call.call_id, "output": output})

    assert verdict_of(streaming, server, task, labkits).startswith("Checked your agent loop: right")


def test_the_skeleton_hands_on_labkits_reference_and_the_check_says_so(
    server: LabkitServer, capsys: pytest.CaptureFixture[str]
) -> None:
    def agent_loop(client: Any, request: Any, message: str, run_tool: Any) -> list[Any]:
        raise NotImplementedError("write the loop")

    mine = exercises.mine_or_reference(
        agent_loop, exercises.reference_loop, "agent loop", probe=exercises.probe_loop
    )
    assert mine is exercises.reference_loop
    assert "Your agent loop is still the skeleton" in capsys.readouterr().out
    check = exercises.check_loop(mine, server)
    assert check.verdict.sentence.startswith(
        "Checked your agent loop (labkit's reference in its place): right on every rule"
    )
    assert "the reference in your loop's place took" in check.measured


# ---------------------------------------------------------------- wrong loops


def _loop(
    *,
    append_call: bool = True,
    append_message: bool = True,
    whole: bool = True,
    run: bool = True,
    stop: bool = True,
    turns: int | None = None,
    extra: dict[str, Any] | None = None,
    returns: bool = True,
) -> Any:
    """A learner's loop with one mistake (or none): the switches name what it does right."""

    def agent_loop(client: Any, request: dict[str, Any], message: str, run_tool: Any) -> Any:
        history: list[Any] = [{"role": "user", "content": message}]
        new = list(history)
        responses: list[Any] = []
        while True:
            response = client.responses.create(
                input=history if whole else new, **{**request, **(extra or {})}
            )
            responses.append(response)
            calls = [i for i in response.output if i.type == "function_call"]
            if (not calls and stop) or len(responses) == turns:
                return responses if returns else None
            new = []
            new += [item for item in response.output if item.type == "message" and append_message]
            for call in calls:
                output = run_tool(call.name, call.arguments) if run else ""
                if append_call:
                    new.append(
                        {
                            "type": "function_call",
                            "call_id": call.call_id,
                            "name": call.name,
                            "arguments": call.arguments,
                        }
                    )
                new.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
            history += new

    return agent_loop


def raises(client: Any, request: Any, message: str, run_tool: Any) -> list[Any]:
    raise ValueError("history is not defined yet")


WRONG = {
    "forgets the function call": (
        _loop(append_call=False),
        "Checked your agent loop: turn 1 sent 2 items where labkit's loop sent 3: "
        "your loop dropped the function call before its output.",
    ),
    "sends only the new items": (
        _loop(whole=False),
        "Checked your agent loop: turn 1 sent 2 items where labkit's loop sent 3: your loop sent only "
        "the new items, but stateless HTTP remembers nothing: every request carries the whole history.",
    ),
    "stops after the first call": (
        _loop(turns=1),
        "Checked your agent loop: your loop stopped after 1 turn where labkit's took 19: it must run "
        "every function call and send the result back, until the model answers in text.",
    ),
    "never runs the tool": (
        _loop(run=False),
        "Checked your agent loop: turn 1 sent an empty tool output: run the tool and send back what it "
        "returned.",
    ),
    "raises": (
        raises,
        "Checked your agent loop: your loop raised ValueError before its first request: "
        "history is not defined yet.",
    ),
    "drops the model's message": (
        _loop(append_message=False),
        "Checked your agent loop: turn 3 sent 7 items where labkit's loop sent 8: your loop dropped the "
        "model's message: append every output item, not only the calls.",
    ),
    "never stops": (
        _loop(stop=False),
        "Checked your agent loop: your loop went on after the model answered in text (turn 18): stop when "
        "a response has no function call.",
    ),
    "asks the server to store": (
        _loop(extra={"store": True}),
        "Checked your agent loop: turn 0 asked the server to keep state (store or previous_response_id): "
        "a stateless loop sends store=False and the whole history.",
    ),
    "returns nothing": (
        _loop(returns=False),
        "Checked your agent loop: your loop returned NoneType: return the responses, one per turn, in order.",
    ),
}


@pytest.mark.parametrize("mistake", list(WRONG))
def test_a_wrong_loop_gets_the_sentence_for_its_mistake(
    mistake: str, server: LabkitServer, task: Scenario, labkits: exercise.LoopRun
) -> None:
    loop, sentence = WRONG[mistake]
    assert verdict_of(loop, server, task, labkits) == sentence


def test_a_wrong_loop_leaves_the_server_serving(server: LabkitServer) -> None:
    """A loop the server refuses (an output with no call before it: a 400 in the API's error shape),
    then a right one on the same server: checked right."""
    wrong = exercises.check_loop(WRONG["forgets the function call"][0], server)
    assert wrong.mine.exchanges[1].status == 400
    assert "No tool call found" in (wrong.mine.exchanges[1].refused or "")
    assert not wrong.right
    assert exercises.check_loop(notebook_solution(), server).right


def test_a_loop_that_never_stops_is_stopped_by_the_check(server: LabkitServer, task: Scenario) -> None:
    run = exercise.play(WRONG["never stops"][0], server.base_url, server.api_key, task)
    assert run.turns == run.cap == 2 * task.turns + 5
    assert isinstance(run.error, Exception)


def test_the_measured_line_says_what_each_loop_ran(
    server: LabkitServer, task: Scenario, labkits: exercise.LoopRun
) -> None:
    run = exercise.play(raises, server.base_url, server.api_key, task)
    measured = exercise.LoopCheck(exercise.compare(run, labkits), run, labkits).measured
    assert measured.startswith("Measured on this server, tools included: labkit's ")
    assert measured.endswith("for 19 turns; your loop sent no request.")


# ---------------------------------------------------------------- a hanging loop, in a real kernel

HANGING = """
from labkit.analysis import exercises
from labkit.client.launcher import LabkitServer

server = LabkitServer(args=["--profile", "local"]).start()

def agent_loop(client, request, message, run_tool):
    client.responses.create(input=[{"role": "user", "content": message}], **request)
    while True:  # waits for an answer it already has
        pass

print("running", flush=True)
exercises.check_loop(agent_loop, server)
"""


@pytest.mark.slow  # a kernel of its own
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX front ends signal the kernel")
def test_kernel_interrupt_stops_a_hanging_loop_and_the_next_check_runs() -> None:
    manager = pytest.importorskip("jupyter_client.manager")
    km, kc = manager.start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        msg_id = kc.execute(HANGING)
        while True:  # the learner's loop is running once the cell says so
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                break
        time.sleep(1.0)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"

        printed: list[str] = []

        def output(msg: dict[str, Any]) -> None:
            if msg["msg_type"] in ("stream", "execute_result"):
                printed.append(msg["content"].get("text") or msg["content"]["data"]["text/plain"])

        check = "print(exercises.check_loop(exercises.reference_loop, server).verdict)"
        content = kc.execute_interactive(check, timeout=120, output_hook=output)["content"]
        if content["status"] == "aborted":  # ipykernel drops a request that lands while it clears the error
            time.sleep(0.5)
            content = kc.execute_interactive(check, timeout=120, output_hook=output)["content"]
        assert content["status"] == "ok", printed
        assert "right on every rule" in "".join(printed)
        kc.execute_interactive("server.close()", timeout=60)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
