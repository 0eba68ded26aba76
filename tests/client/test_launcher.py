"""A notebook's server and its kernel: Interrupt leaves the server serving, a dead kernel takes it along.

The kernel tests drive a real IPython kernel through ``jupyter_client``, as a notebook front end
does: ``interrupt_kernel`` sends SIGINT to the kernel's process group, ``restart_kernel(now=True)``
and ``shutdown_kernel(now=True)`` SIGKILL it. The lifeline tests need no kernel: closing the pipe
``LabkitServer`` holds is what the death of its process does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labkit.client.launcher import LabkitServer

pytestmark = pytest.mark.slow  # real kernels started and killed

ARGS = ["--profile", "local"]  # the quickest start
# A notebook's first cell: start a server, say where it is (labkit.lab's LabkitServer, without
# the seconds labkit.lab's plotting imports take).
START = f"""
import os
from labkit.client.launcher import LabkitServer
server = LabkitServer(args={ARGS!r}).start()
print(server.url, server.process.pid, server.db.parent, os.getpid())
"""

posix_kernel = pytest.mark.skipif(sys.platform == "win32", reason="POSIX front ends signal the kernel")


def gone(pid: int) -> bool:
    """The process has exited: no such process, or a zombie nobody has reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    if not Path("/proc/self/stat").exists():
        return False  # no /proc (macOS): it is there; launchd reaps an orphan at once
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True  # it ended meanwhile


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def health(url: str) -> int:
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
        return answer.status


# ---------------------------------------------------------------- the lifeline, without a kernel


@pytest.mark.parametrize(
    "workers",
    [1, pytest.param(2, marks=pytest.mark.skipif(not hasattr(os, "fork"), reason="--workers forks"))],
)
def test_the_server_stops_and_cleans_up_when_its_parent_is_gone(workers: int) -> None:
    server = LabkitServer(workers=workers, args=ARGS).start()
    try:
        assert server.url is not None and health(server.url) == 200
        pids, folder = server.processes(), server.db.parent
        assert len(pids) == (workers + 1 if workers > 1 and Path("/proc").exists() else 1)
        assert server.process is not None and server.process.stdin is not None
        server.process.stdin.close()  # what this process's death does: the pipe's only writer is gone
        assert wait_until(lambda: all(gone(pid) for pid in pids)), server.log
        assert server.process.wait(5) == 0
        assert wait_until(lambda: not folder.exists())
    finally:
        server.close()


def test_stopping_keeps_the_folder_for_a_restart_and_closing_removes_it() -> None:
    with LabkitServer(args=ARGS) as server:
        folder = server.db.parent
        server.stop()  # SIGTERM: the parent is alive, so the folder (its database) stays
        assert folder.exists() and server.db.exists()
        server.start()
        assert server.url is not None and health(server.url) == 200
    assert not folder.exists()


def test_a_given_database_folder_is_never_removed(tmp_path: Path) -> None:
    server = LabkitServer(db=tmp_path / "responses.sqlite3", args=ARGS).start()
    assert server.process is not None and server.process.stdin is not None
    assert "--remove-with-parent" not in server.process.args
    server.process.stdin.close()
    assert server.process.wait(5) == 0
    server.close()
    assert (tmp_path / "responses.sqlite3").exists()


def labkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_flags_are_in_the_help_and_the_folder_needs_the_lifeline(tmp_path: Path) -> None:
    help_text = labkit("serve", "--help").stdout
    assert "--exit-with-parent" in help_text and "--remove-with-parent DIR" in help_text
    result = labkit("serve", "--port", "0", "--remove-with-parent", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--remove-with-parent needs --exit-with-parent" in result.stderr
    assert tmp_path.exists()


# ---------------------------------------------------------------- a real kernel


@pytest.fixture
def start_kernel() -> Iterator[Callable[[], tuple[Any, Any]]]:
    """Start kernels as a front end does (each shut down, hard, at the end)."""
    pytest.importorskip("ipykernel")
    manager = pytest.importorskip("jupyter_client.manager")
    started: list[tuple[Any, Any]] = []

    def start() -> tuple[Any, Any]:
        km, kc = manager.start_new_kernel(kernel_name="python3", startup_timeout=60)
        started.append((km, kc))
        return km, kc

    yield start
    for km, kc in started:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc: Any, code: str, timeout: float = 60) -> tuple[dict[str, Any], str]:
    """Execute a cell: its reply's content and what it printed (an error's traceback included)."""
    printed: list[str] = []

    def output(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            printed.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=output)
    return reply["content"], "".join(printed)


def start_server(kc: Any) -> tuple[str, int, Path, int]:
    """Run the start cell: the server's url, pid and folder, and the kernel's pid."""
    content, printed = run(kc, START)
    assert content["status"] == "ok", printed
    url, pid, folder, kernel_pid = printed.split()
    return url, int(pid), Path(folder), int(kernel_pid)


@posix_kernel
def test_interrupt_leaves_the_server_serving(start_kernel: Callable[[], tuple[Any, Any]]) -> None:
    km, kc = start_kernel()
    url, pid, _, _ = start_server(kc)
    msg_id = kc.execute("import time; time.sleep(60)")
    while True:  # the cell is running once the kernel announces its input
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
    time.sleep(0.2)
    started = time.monotonic()
    km.interrupt_kernel()  # SIGINT to the kernel's process group
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - started < 10

    check = "import urllib.request; print(urllib.request.urlopen(server.url + '/healthz').status)"
    content, printed = run(kc, check)
    if content["status"] == "aborted":  # ipykernel drops a request that lands while it clears the error
        time.sleep(0.5)
        content, printed = run(kc, check)
    assert content["status"] == "ok" and printed.strip() == "200", printed
    assert health(url) == 200 and not gone(pid)


@posix_kernel
def test_a_killed_kernel_leaves_no_server(start_kernel: Callable[[], tuple[Any, Any]]) -> None:
    _, kc = start_kernel()
    url, pid, folder, kernel_pid = start_server(kc)
    assert health(url) == 200 and folder.exists()
    os.kill(kernel_pid, signal.SIGKILL)  # no atexit: only the lifeline can stop the server
    assert wait_until(lambda: gone(pid), 5.0)
    assert wait_until(lambda: not folder.exists(), 1.0)


@posix_kernel
def test_restart_and_run_all_gets_a_new_server(start_kernel: Callable[[], tuple[Any, Any]]) -> None:
    km, kc = start_kernel()
    _, old_pid, old_folder, _ = start_server(kc)
    km.restart_kernel(now=True)  # SIGKILL to the kernel's group, then a new kernel
    kc.wait_for_ready(timeout=60)
    url, pid, _, _ = start_server(kc)
    assert pid != old_pid and health(url) == 200
    assert wait_until(lambda: gone(old_pid), 5.0)
    assert wait_until(lambda: not old_folder.exists(), 1.0)


@posix_kernel
def test_two_notebooks_have_a_server_each(start_kernel: Callable[[], tuple[Any, Any]]) -> None:
    with ThreadPoolExecutor(2) as pool:
        kernels = list(pool.map(lambda _: start_kernel(), range(2)))
        servers = list(pool.map(lambda kernel: start_server(kernel[1]), kernels))
    (url1, pid1, folder1, _), (url2, pid2, folder2, _) = servers
    assert url1 != url2 and pid1 != pid2 and folder1 != folder2
    assert health(url1) == 200 and health(url2) == 200
