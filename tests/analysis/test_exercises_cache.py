"""Exercise 3 (notebook 03): the learner's connection cache, checked on the wire.

Each class runs in a real ``labkit serve --connection-cache`` (started by ``LabkitServer``,
which writes the class's source as a module, as ``lab.server(connection_cache=...)`` does), and
the check drives the official SDK through the contract's cases. The notebook's solution passes;
each usual mistake gets its own sentence.
"""

from __future__ import annotations

import json
import linecache
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from labkit.analysis.exercises import (
    ReferenceCache,
    Verdict,
    cache_probe,
    check_connection_cache,
    mine_or_reference,
)
from labkit.analysis.exercises.cache import delivered, response_id
from labkit.analysis.paired import Saving
from labkit.client.agent import take_turns
from labkit.client.launcher import LabkitServer
from labkit.client.learner_source import module_source
from tests.helpers import REPO

NOTEBOOK = REPO / "notebooks" / "03_persistent_socket_cache.ipynb"
LOCAL = ["--profile", "local"]


def cells() -> dict[str, str]:
    notebook = json.loads(NOTEBOOK.read_text())
    return {cell["id"]: "".join(cell["source"]) for cell in notebook["cells"]}


def in_a_cell(source: str, name: str) -> type:
    """The class ``name`` defined by running ``source`` as a notebook cell runs: from a file that
    exists only in ``linecache`` (where the kernel keeps its cells), in a module of no file."""
    filename = f"<cell-{uuid.uuid4().hex[:8]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "learner_cell"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def checked(cache_class: type) -> Verdict:
    with LabkitServer(args=LOCAL, connection_cache=cache_class) as server:
        return check_connection_cache(server=server)


# ---------------------------------------------------------------- the usual mistakes


class Solution:
    """The notebook's solution, as a learner writes it: the usual mistakes are variants of it."""

    def __init__(self) -> None:
        self.latest: dict[Any, Any] = {}

    def serve(self, previous_response_id: str) -> Any:
        for entry in self.latest.values():
            if response_id(entry) == previous_response_id:
                return entry
        return None

    def keep(self, lane: Any, entry: Any) -> None:
        self.latest[lane] = entry

    def failed(self, lane: Any, previous_response_id: str) -> None:
        entry = self.latest.get(lane)
        if entry is not None and response_id(entry) == previous_response_id:
            del self.latest[lane]


class AlwaysMiss(Solution):
    def serve(self, previous_response_id: str) -> Any:
        return None


class NeverEvict(Solution):
    def failed(self, lane: Any, previous_response_id: str) -> None:
        pass


class EvictEverything(Solution):
    def failed(self, lane: Any, previous_response_id: str) -> None:
        self.latest.clear()


class WrongLane(Solution):
    def keep(self, lane: Any, entry: Any) -> None:
        self.latest = {None: entry}  # one entry for the connection, whatever the lane


class Raising(Solution):
    def keep(self, lane: Any, entry: Any) -> None:
        raise ValueError("no room")


class Hanging(Solution):
    def serve(self, previous_response_id: str) -> Any:
        while True:
            pass


class WrongType(Solution):
    def serve(self, previous_response_id: str) -> Any:
        entry = super().serve(previous_response_id)
        return None if entry is None else response_id(entry)


class Trimming(Solution):
    def keep(self, lane: Any, entry: Any) -> None:
        del entry.items[:-1]  # only the latest item, to save memory: the history is gone
        super().keep(lane, entry)


class Shared(Solution):
    everything: ClassVar[dict[str, Any]] = {}  # on the class: every connection's entries in one place

    def serve(self, previous_response_id: str) -> Any:
        return self.everything.get(previous_response_id)

    def keep(self, lane: Any, entry: Any) -> None:
        super().keep(lane, entry)
        self.everything[response_id(entry)] = entry

    def failed(self, lane: Any, previous_response_id: str) -> None:
        if lane in self.latest and response_id(self.latest[lane]) == previous_response_id:
            del self.latest[lane]
            self.everything.pop(previous_response_id, None)


MISTAKES = {
    AlwaysMiss: "Checked your connection cache: turn 2 named the previous response but your cache missed: "
    "every follow-up re-read the whole history from the store (and 1 more below).",
    NeverEvict: "Checked your connection cache: after a continuation of lane a's latest failed, your cache "
    "still served it: failed must evict it, so that a retry comes from the store.",
    EvictEverything: "Checked your connection cache: a fork that failed on lane c evicted lane a's latest "
    "response: failed evicts only the failing lane's own latest.",
    WrongLane: "Checked your connection cache: lane a's follow-up missed after lane b kept a response: keep "
    "one latest entry per lane (lane b's replaced lane a's) (and 1 more below).",
    Raising: "Checked your connection cache: your Raising.keep raised ValueError: no room, on create 1 of "
    "its connection; labkit's cache served that connection from then on (on 3 of the check's connections).",
    Hanging: "Checked your connection cache: your Hanging.serve did not return within 0.5 s and was stopped, "
    "on create 2 of its connection; labkit's cache served that connection from then on "
    "(on 4 of the check's connections).",
    Trimming: "Checked your connection cache: your Trimming.serve returned an entry changed since keep was "
    "given it (its items: 2 when it was kept, 1 when it was served; the next turn is built from it, so keep "
    "it as it is), on create 2 of its connection; labkit's cache served that connection from then on "
    "(on 3 of the check's connections).",
    Shared: "Checked your connection cache: a second connection named the first one's response and your "
    "cache handed it over: entries must stay with their connection (keep them on self, not on the class).",
}


@pytest.mark.parametrize("mistake", list(MISTAKES), ids=lambda c: c.__name__)
def test_each_usual_mistake_gets_its_sentence(mistake: type) -> None:
    verdict = checked(mistake)
    assert not verdict.right
    assert verdict.sentence == MISTAKES[mistake]


def test_a_wrong_type_is_named_with_what_serve_returned() -> None:
    verdict = checked(WrongType)
    assert verdict.broken[0].startswith("your WrongType.serve returned a str ('resp_")
    assert "not an entry keep was given, or None, on create 2 of its connection" in verdict.broken[0]


def test_the_reference_keeps_every_rule_and_says_it_stood_in() -> None:
    verdict = checked(ReferenceCache)
    assert verdict.right, verdict.broken
    assert verdict.sentence.startswith(
        "Checked your connection cache (this run: labkit's reference in its place): right on every rule ("
    )
    assert len(verdict.kept) == 8


# ---------------------------------------------------------------- the notebook's cells


def test_the_notebooks_solution_passes_the_check() -> None:
    solution = re.search(r"```python\n(.*?)```", cells()["x305"], re.S)
    assert solution is not None
    mine = in_a_cell(solution.group(1), "MyCache")
    assert mine_or_reference(mine, ReferenceCache, "connection cache", probe=cache_probe) is mine
    verdict = checked(mine)
    assert verdict.sentence.startswith("Checked your connection cache: right on every rule (")


def test_the_skeleton_hands_on_the_reference_without_calling_it(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton = in_a_cell(cells()["x302"], "MyCache")
    assert (
        mine_or_reference(skeleton, ReferenceCache, "connection cache", probe=cache_probe) is ReferenceCache
    )
    assert "still the skeleton" in capsys.readouterr().out
    # a method that never returns is not run in the notebook: the probe only reads the source
    endless = in_a_cell(
        "class Endless:\n"
        "    def serve(self, previous_response_id):\n        while True:\n            pass\n"
        "    def keep(self, lane, entry):\n        pass\n"
        "    def failed(self, lane, previous_response_id):\n        pass\n",
        "Endless",
    )
    assert mine_or_reference(endless, ReferenceCache, "connection cache", probe=cache_probe) is endless


def test_a_cells_class_becomes_a_module_with_what_it_reads() -> None:
    source = cells()["x305"].split("```python\n")[1].split("```")[0]
    text = module_source(in_a_cell(source, "MyCache"))
    assert "from labkit.connection_cache import response_id" in text  # where labkit's own lives
    assert "class MyCache:" in text
    namespace: dict[str, Any] = {}
    exec(compile(text, "written.py", "exec"), namespace)  # loads on its own, as the server loads it
    assert namespace["MyCache"]().serve("resp_1") is None


# ---------------------------------------------------------------- the race and its sentence


@pytest.fixture(scope="module")
def two_servers() -> Iterator[tuple[LabkitServer, LabkitServer]]:
    with LabkitServer(args=LOCAL) as ours, LabkitServer(args=LOCAL, connection_cache=AlwaysMiss) as theirs:
        yield ours, theirs


def test_an_always_missing_cache_makes_its_client_resend_the_whole_conversation(
    two_servers: tuple[LabkitServer, LabkitServer],
) -> None:
    ours, theirs = two_servers
    labels = ["websocket", "your cache"]
    *_, last = take_turns(
        ours.base_url, labels, "synthetic:turns=4", elsewhere={"your cache": ("websocket", theirs.base_url)}
    )
    read = {}
    for label, rollout in last.items():
        frame = rollout.frame()
        rows = frame[(frame["source"] == "server") & (frame["stage"] == "input_safety")]
        read[label] = list(rows.groupby("turn")["items"].sum())
    assert len(read["your cache"]) == len(read["websocket"]) == 4  # every turn played, none failed
    # labkit's cache: the classifier reads the new items only; a cache that misses: the whole
    # history, resent by the client on every follow-up
    assert read["websocket"][1:] == [1, 1, 1]
    assert read["your cache"][1:] == [3, 5, 7]


def test_the_share_delivered_is_true_for_any_measurement() -> None:
    labkit = Saving(50, 3, 200, 18)
    assert delivered(Saving(48, 3, 200, 18), labkit).endswith(
        "it delivered labkit's saving, within the noise (96% ± 8%)."
    )
    assert delivered(Saving(0, 3, 200, 18), labkit).endswith(
        "it delivered about none of labkit's saving (0% ± 6%)."
    )
    assert delivered(Saving(-60, 3, 200, 18), labkit) == (
        "Your cache cost 60 ± 3 ms a turn more than the sprint, where labkit's saved 50 ± 3 ms: it delivered "
        "none of labkit's saving."
    )
    assert "no share can be told" in delivered(Saving(10, 3, 200, 18), Saving(2, 3, 200, 18))


def test_lab_server_runs_a_learners_class_on_a_server_of_its_own_even_in_a_room(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from labkit import lab

    monkeypatch.setenv("LABKIT_URL", "http://10.0.0.5:8765")  # a room nobody may run learner code on
    mine = lab.server(connection_cache=ReferenceCache, args=LOCAL)
    try:
        assert not mine.shared and mine.base_url.startswith("http://127.0.0.1:")
        assert "your connection cache runs on a server of this notebook's own" in capsys.readouterr().out
        assert any("cache is ReferenceCache" in line for line in mine.log)
        folder = Path(mine.db).parent
        assert list(folder.glob("learner_*.py"))
    finally:
        mine.close()
    assert not folder.exists()  # the module went with the server


def test_a_race_run_by_a_faulty_cache_is_not_credited_to_it(
    two_servers: tuple[LabkitServer, LabkitServer],
) -> None:
    from labkit.analysis.exercises.cache import raced

    ours, _ = two_servers
    with LabkitServer(args=LOCAL, connection_cache=Hanging) as theirs:
        labels = ["sprint", "websocket", "your cache"]
        elsewhere = {"your cache": ("websocket", theirs.base_url)}
        *_, last = take_turns(ours.base_url, labels, "synthetic:turns=4", elsewhere=elsewhere)
    said = raced({label: rollout.frame() for label, rollout in last.items()})
    assert said.startswith("Your cache faulted on turn 1 (Hanging.serve did not return within 0.5 s")
    assert "so this race measured labkit's, not yours" in said


def test_a_server_without_a_learners_class_is_not_checked(
    two_servers: tuple[LabkitServer, LabkitServer],
) -> None:
    ours, _ = two_servers  # labkit's own cache: a verdict on it would be about nobody's code
    with pytest.raises(ValueError, match="a server started with your class"):
        check_connection_cache(server=ours)
