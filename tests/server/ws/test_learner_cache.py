"""``labkit serve --connection-cache FILE.py:ClassName``: a learner's connection cache, run by the
real server behind its guard, driven by the official SDK over WebSocket mode.

Each learner class below is written to a file and loaded by a real ``labkit serve``; the tests
read where each follow-up's history came from (the hydration span) and the fault the guard
recorded. A broken class never takes the server down, never serves a wrong conversation, and
loses nothing a connection kept.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.server.ws.learner_cache import GuardedCache, TooSlow, call_within
from tests.helpers import by_stage, server_spans

MODEL = "labkit-spark"

CLASSES = '''
class Right:
    """Each lane's latest entry, found by id from any lane; a failure evicts its own lane's."""

    def __init__(self):
        self.latest = {}

    def serve(self, previous_response_id):
        for entry in self.latest.values():
            if entry.response["id"] == previous_response_id:
                return entry
        return None

    def keep(self, lane, entry):
        self.latest[lane] = entry

    def failed(self, lane, previous_response_id):
        entry = self.latest.get(lane)
        if entry is not None and entry.response["id"] == previous_response_id:
            del self.latest[lane]


class AlwaysMiss(Right):
    def serve(self, previous_response_id):
        return None


class RaisingKeep(Right):
    def keep(self, lane, entry):
        raise ValueError("no room")


class Hanging(Right):
    def serve(self, previous_response_id):
        while True:
            pass


class WrongType(Right):
    def serve(self, previous_response_id):
        entry = super().serve(previous_response_id)
        return None if entry is None else entry.response["id"]


class WrongEntry(Right):
    def serve(self, previous_response_id):
        return next(iter(self.latest.values()), None)  # whatever it holds, asked for it or not


class Trimming(Right):
    def keep(self, lane, entry):
        del entry.items[:-1]  # only the latest item, "to save memory": the history is gone
        super().keep(lane, entry)


class SharedByClass(Right):
    everything = {}  # one dict for every instance: every connection's entries

    def serve(self, previous_response_id):
        return self.everything.get(previous_response_id)

    def keep(self, lane, entry):
        self.everything[entry.response["id"]] = entry
'''


@pytest.fixture(scope="module")
def classes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("learner") / "caches.py"
    path.write_text(textwrap.dedent(CLASSES))
    return path


@pytest.fixture(scope="module")
def serving(classes_file: Path) -> Iterator[Any]:
    """A server per learner class, started on first use, all closed at the module's end."""
    started: dict[str, LabkitServer] = {}

    def server_for(name: str) -> LabkitServer:
        if name not in started:
            args = ["--profile", "local", "--connection-cache", f"{classes_file}:{name}"]
            started[name] = LabkitServer(args=args).start()
        return started[name]

    yield server_for
    for server in started.values():
        server.close()


def sdk(server: LabkitServer) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)


def create(conn: Any, **body: Any) -> Any:
    """One create on the SDK's connection: its completed response, or its error event."""
    body.setdefault("input", "Go on.")
    conn.response.create(model=MODEL, **body)
    for event in conn:
        if event.type == "error":
            return event
        if event.type == "response.completed":
            return event.response
    raise AssertionError("the connection closed")


def hydration(server: LabkitServer, response: Any) -> dict[str, Any]:
    return by_stage(server_spans(server.base_url, response.id, key=server.api_key))["hydration"]


def two_turns(server: LabkitServer, store: bool = False) -> tuple[Any, Any]:
    with sdk(server).responses.connect() as conn:
        first = create(conn, input="Remember 7.", store=store)
        second = create(conn, previous_response_id=first.id, store=store)
    return first, second


def fell_back(server: LabkitServer) -> dict[str, Any]:
    """Two turns of store=false (only memory holds the first response) on a cache that faults: the
    follow-up completes from labkit's cache; its hydration span, which names the fault."""
    _, follow_up = two_turns(server, store=False)
    assert follow_up.status == "completed"
    span = hydration(server, follow_up)
    assert span["detail"]["source"] == "connection_cache"
    assert span["detail"]["learner_cache"] == "labkit's"
    return span


# ---------------------------------------------------------------- right and wrong classes, on the wire


def test_a_right_class_serves_follow_ups_from_its_own_cache(serving: Any) -> None:
    server = serving("Right")
    _, follow_up = two_turns(server)
    span = hydration(server, follow_up)
    assert follow_up.status == "completed"
    assert span["detail"]["source"] == "connection_cache"
    assert span["detail"]["learner_cache"] == "yours"
    assert "cache_fault" not in span["detail"]
    assert "cache is Right" in "\n".join(server.log)  # the server said whose cache it runs


def test_forks_across_lanes_reach_the_learners_cache(serving: Any) -> None:
    server = serving("Right")
    with sdk(server).responses.connect() as conn:
        a = create(conn, input="Lane a.", stream_id="a", store=False)
        fork = create(conn, previous_response_id=a.id, stream_id="b", store=False)
    assert hydration(server, fork)["detail"]["source"] == "connection_cache"


def test_an_always_missing_class_sends_every_follow_up_to_the_store(serving: Any) -> None:
    server = serving("AlwaysMiss")
    _, follow_up = two_turns(server, store=True)
    span = hydration(server, follow_up)
    assert span["detail"]["source"] == "store"
    assert span["detail"]["learner_cache"] == "yours"  # the miss was its answer, not a fault's
    assert (
        by_stage(server_spans(server.base_url, follow_up.id, key=server.api_key))["input_safety"]["items"] > 1
    )
    # store=false: nothing but the cache holds the first response, so the miss is the API's error
    _, refused = two_turns(server, store=False)
    assert refused.type == "error" and refused.error.code == "previous_response_not_found"


def test_a_raising_method_falls_back_to_labkits_cache_and_loses_nothing(serving: Any) -> None:
    span = fell_back(serving("RaisingKeep"))
    assert span["detail"]["cache_fault"] == (
        "RaisingKeep.keep raised ValueError: no room, on create 1 of its connection; "
        "labkit's cache served that connection from then on."
    )


def test_an_endless_loop_is_stopped_and_the_server_keeps_serving(serving: Any) -> None:
    server = serving("Hanging")
    _, follow_up = two_turns(server, store=False)
    fault = hydration(server, follow_up)["detail"]["cache_fault"]
    assert fault.startswith("Hanging.serve did not return within 0.5 s and was stopped")
    # the same server goes on: another connection, another stopped call, the conversation intact
    _, again = two_turns(server, store=False)
    assert again.status == "completed"
    assert hydration(server, again)["detail"]["source"] == "connection_cache"


def test_a_wrong_type_is_a_fault_naming_serve(serving: Any) -> None:
    server = serving("WrongType")
    _, follow_up = two_turns(server, store=False)
    fault = hydration(server, follow_up)["detail"]["cache_fault"]
    assert fault.startswith("WrongType.serve returned a str (")
    assert "not an entry keep was given, or None" in fault


def test_another_responses_entry_is_never_served(serving: Any) -> None:
    server = serving("WrongEntry")
    with sdk(server).responses.connect() as conn:
        a = create(conn, input="Lane a.", stream_id="a", store=True)
        b = create(conn, input="Lane b.", stream_id="b", store=True)
        follow_up = create(conn, previous_response_id=b.id, stream_id="b", store=True)
    span = hydration(server, follow_up)
    # its serve handed over lane a's entry for b: refused, and labkit's cache served b's history
    assert span["detail"]["cache_fault"].startswith(
        f"WrongEntry.serve was asked for {b.id} and returned the entry of {a.id}"
    )
    assert span["detail"]["source"] == "connection_cache"
    items = sdk(server).responses.input_items.list(follow_up.id)
    assert items.data  # the follow-up's own input was stored: its conversation is b's, not a's


def test_another_connections_entry_is_never_served(serving: Any) -> None:
    server = serving("SharedByClass")
    client = sdk(server)
    with client.responses.connect() as one, client.responses.connect() as two:
        mine = create(one, input="Mine alone.", store=False)
        refused = create(two, previous_response_id=mine.id, store=False)
        after = create(two, input="Anything left?", store=False)
    assert refused.type == "error" and refused.error.code == "previous_response_not_found"
    fault = hydration(server, after)["detail"]["cache_fault"]
    assert fault.startswith(
        f"SharedByClass.serve returned an entry for {mine.id} that this connection never kept"
    )


def test_an_entry_changed_after_keep_is_a_fault_and_labkits_copy_serves_it_whole(serving: Any) -> None:
    span = fell_back(serving("Trimming"))
    assert span["detail"]["cache_fault"] == (
        "Trimming.serve returned an entry changed since keep was given it (its items: 2 when it was kept, "
        "1 when it was served; the next turn is built from it, so keep it as it is), on create 2 of its "
        "connection; labkit's cache served that connection from then on."
    )
    assert span["items"] == 2  # labkit's entry was never the learner's to trim: question and answer


# ---------------------------------------------------------------- loading, once, at start


def serve_with(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "labkit", "serve", "--port", "0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("{file}:Missing", "has no class Missing; it defines AlwaysMiss, Hanging, RaisingKeep, Right,"),
        ("{dir}/absent.py:Right", "no file"),
        ("{file}", "takes FILE.py:ClassName"),
        ("{broken}:Right", "does not load (line 1): SyntaxError"),
    ],
)
def test_a_class_that_cannot_be_loaded_is_one_line_and_exit_2(
    classes_file: Path, spec: str, said: str
) -> None:
    broken = classes_file.with_name("broken.py")
    broken.write_text("class Right(:\n")
    spec = spec.format(file=classes_file, dir=classes_file.parent, broken=broken)
    done = serve_with("--connection-cache", spec)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr


def test_a_rooms_server_never_loads_learner_code(classes_file: Path) -> None:
    done = serve_with("--host", "0.0.0.0", "--allow-no-keys", "--connection-cache", f"{classes_file}:Right")
    assert done.returncode == 2
    assert "only on a server of the learner's own" in done.stderr


# ---------------------------------------------------------------- the guard, without I/O


class Slow:
    def serve(self, previous_response_id: str) -> None:
        while True:
            pass

    def keep(self, lane: Any, entry: Any) -> None:
        pass

    def failed(self, lane: Any, previous_response_id: Any) -> None:
        raise SystemExit(3)  # even this is the learner's fault, not the server's end


def test_off_the_main_thread_the_deadline_abandons_the_call() -> None:
    import threading

    caught: list[BaseException] = []
    stop = threading.Event()

    def endless() -> None:  # endless for the guard; the test ends it once the guard has given up
        while not stop.is_set():
            pass

    def run() -> None:
        try:
            call_within(0.05, endless)
        except TooSlow as exc:
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(5)
    stop.set()  # the abandoned call would otherwise spin in this process for good
    assert caught and isinstance(caught[0], TooSlow)


class Replacing:
    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    def serve(self, previous_response_id: str) -> Any:
        return self.kept.get(previous_response_id)

    def keep(self, lane: Any, entry: Any) -> None:
        entry.items = entry.items[-1:]  # a new list on the learner's copy
        self.kept[entry.id] = entry

    def failed(self, lane: Any, previous_response_id: Any) -> None:
        pass


def test_an_attribute_replaced_after_keep_is_a_fault_and_never_reaches_labkits_entry() -> None:
    cache = GuardedCache(Replacing, ids=lambda entry: entry.id, kinds=SimpleNamespace)
    kept = SimpleNamespace(id="resp_1", items=[{"role": "user"}, {"role": "assistant"}])
    cache.keep("a", kept)
    assert cache.serve("resp_1") is kept  # labkit's own entry, whole
    assert cache.fault is not None and cache.fault.method == "serve"
    assert cache.fault.problem.startswith("returned an entry changed since keep was given it (its items were")
    assert len(kept.items) == 2 and not cache.yours


def test_the_guard_turns_system_exit_into_a_fault() -> None:
    cache = GuardedCache(Slow, ids=lambda entry: entry, kinds=str, deadline_s=0.05)
    cache.keep("a", "resp_1")
    cache.failed("a", "resp_1")
    assert cache.fault is not None and cache.fault.problem == "raised SystemExit: 3"
    assert cache.serve("resp_1") is None  # labkit's cache, which evicted it, answers from now on
