"""The agent side's real tools, the sample repository they work on, and the default scenario.

The scenario is replayed call by call through ``run_tool`` in a sandbox, so the
scripted rollout the server plays is one a real client can actually carry out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labkit.client import confine, runner
from labkit.client.sandbox import SAMPLE_REPO, Sandbox
from labkit.client.tools import (
    MAX_MATCHES,
    SPECS_BY_NAME,
    TOOL_SPECS,
    TOOLS,
    apply_patch,
    is_error,
    list_files,
    read_file,
    run_tests,
    run_tool,
    search,
)
from labkit.engine.policies import Call, Say, ScriptedPolicy
from labkit.paths import default_data_dir
from labkit.text.tokenizer import encode_text

pytestmark = pytest.mark.slow  # the tool sandbox's test runs and time limits

DATA_DIR = default_data_dir()
SCENARIO_FILE = DATA_DIR / "scenarios" / "fix-failing-test.json"
SCENARIO: dict[str, Any] = json.loads(SCENARIO_FILE.read_text())
CALLS: list[dict[str, Any]] = [step["call"] for step in SCENARIO["steps"] if "call" in step]
PATCHES = [call for call in CALLS if call["name"] == "apply_patch"]


def args(call: dict[str, Any]) -> str:
    return json.dumps(call["arguments"])


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (caches included) with the SHA-256 of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def unittest_summary(output: str) -> tuple[int, list[str], list[str]]:
    """Tests run, failed test ids and errored test ids, read from unittest's output."""
    ran = re.search(r"^Ran (\d+) tests? in", output, re.M)
    assert ran, output
    failed = re.findall(r"^FAIL: (\S+)", output, re.M)
    errored = re.findall(r"^ERROR: (\S+)", output, re.M)
    return int(ran.group(1)), failed, errored


@pytest.fixture
def box() -> Iterator[Sandbox]:
    with Sandbox() as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def replay() -> list[tuple[dict[str, Any], str]]:
    """Each scenario call with the output ``run_tool`` gave it, in one fresh sandbox."""
    with Sandbox() as sandbox:
        return [(call, run_tool(sandbox, call["name"], args(call))) for call in CALLS]


# ---------------------------------------------------------------- (a) the bug and its fix


def test_the_suite_fails_once_before_the_fix_and_passes_after(box: Sandbox) -> None:
    before = run_tests(box)
    assert before.endswith("exit status: 1 (failed)")
    ran, failed, errored = unittest_summary(before)
    assert ran >= 60
    assert len(failed) == 1 and not errored, before
    assert "FAILED (failures=1)" in before

    assert len(PATCHES) == 1
    diff = run_tool(box, "apply_patch", args(PATCHES[0]))
    assert not is_error(diff), diff
    changed = [line for line in diff.splitlines()[2:] if line.startswith(("-", "+"))]
    assert len(changed) == 2, diff  # one line out, one line in

    after = run_tests(box)
    assert after.endswith("exit status: 0 (passed)"), after
    ran_after, failed_after, errored_after = unittest_summary(after)
    assert (ran_after, failed_after, errored_after) == (ran, [], [])
    assert "\nOK" in after


# ---------------------------------------------------------------- (b) replaying the scenario


def test_every_scenario_call_runs_without_an_error(replay: list[tuple[dict[str, Any], str]]) -> None:
    for call, output in replay:
        assert not is_error(output), (call, output)
        assert output.strip(), call


def test_the_scenario_goes_from_red_to_green(replay: list[tuple[dict[str, Any], str]]) -> None:
    patched_at = next(i for i, (call, _) in enumerate(replay) if call["name"] == "apply_patch")
    runs = [(i, out) for i, (call, out) in enumerate(replay) if call["name"] == "run_tests"]
    assert runs[0][0] < patched_at < runs[-1][0]
    for i, output in runs:
        expected = "exit status: 1 (failed)" if i < patched_at else "exit status: 0 (passed)"
        assert output.endswith(expected), output
    assert replay[-1][0]["name"] != "run_tests" or replay[-1][1].endswith("(passed)")


def test_the_scenario_is_shaped_like_a_real_rollout() -> None:
    assert SCENARIO["name"] == SCENARIO_FILE.stem
    assert SCENARIO["description"] and SCENARIO["user"]
    assert (DATA_DIR / SCENARIO["instructions_file"]).is_file()
    assert (DATA_DIR / SCENARIO["repo"]).resolve() == SAMPLE_REPO.resolve()
    steps = SCENARIO["steps"]
    assert 18 <= len(steps) <= 22
    # Every step but the last calls a tool (the policy moves on per tool result); the last one answers.
    assert all("call" in step for step in steps[:-1])
    assert set(steps[-1]) == {"say"}
    says = [step for step in steps[:-1] if "say" in step]
    assert 1 <= len(says) <= len(steps) // 3
    assert all(len(encode_text(step["say"])) < 60 for step in says)
    assert {call["name"] for call in CALLS} == set(TOOLS)

    policy = ScriptedPolicy.from_steps(steps)
    assert all(isinstance(actions[-1], Call) for actions in policy.steps[:-1])
    assert policy.steps[-1] == [Say(steps[-1]["say"])]


# ---------------------------------------------------------------- (c) each tool


def test_sandbox_copies_and_cleans_up(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0junk")
    with Sandbox(tmp_path) as sandbox:
        assert sandbox.path != tmp_path and (sandbox.path / "pkg" / "a.py").read_text() == "x = 1\n"
        assert not (sandbox.path / "pkg" / "__pycache__").exists()
        assert not sandbox.closed
    assert sandbox.closed and not sandbox.path.exists()
    sandbox.close()  # twice is fine
    with pytest.raises(FileNotFoundError):
        Sandbox(tmp_path / "missing")


def test_list_files(box: Sandbox) -> None:
    (box.path / "tally" / "__pycache__").mkdir()
    (box.path / "tally" / "__pycache__" / "money.cpython-311.pyc").write_bytes(b"\0")
    (box.path / "tally" / "stale.pyc").write_bytes(b"\0")
    listing = list_files(box).splitlines()
    assert listing == sorted(listing)
    assert "README.md" in listing and "tally/money.py" in listing and "tests/test_invoice.py" in listing
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in listing)
    assert all(not p.startswith(("/", "./")) for p in listing)
    assert list_files(box, path="tests") == "\n".join(p for p in listing if p.startswith("tests/"))
    assert list_files(box, path="tally/money.py") == "tally/money.py"
    assert list_files(box, path="nowhere") == "error: no such directory: nowhere"
    assert list_files(box, path="..").startswith("error: path is outside the repository")


def test_read_file(box: Sandbox) -> None:
    text = read_file(box, path="tally/money.py")
    source = (box.path / "tally" / "money.py").read_text().splitlines()
    lines = text.splitlines()
    assert len(lines) == len(source)
    assert lines[0] == f"   1  {source[0]}"
    assert lines[11] == f"  12  {source[11]}"
    assert 300 <= len(encode_text(text)) <= 2500


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../etc/passwd", "error: path is outside the repository: ../etc/passwd"),
        ("tally/../../x.py", "error: path is outside the repository: tally/../../x.py"),
        ("/etc/passwd", "error: path must be relative to the repository root: /etc/passwd"),
        ("~/.bashrc", "error: path must be relative to the repository root: ~/.bashrc"),
        ("tally/nope.py", "error: no such file: tally/nope.py"),
        ("tally", "error: tally is a directory (use list_files to see what is in it)"),
    ],
)
def test_read_file_errors(box: Sandbox, path: str, error: str) -> None:
    assert read_file(box, path=path) == error


def test_read_file_refuses_binary_and_escaping_symlinks(box: Sandbox, tmp_path: Path) -> None:
    (box.path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    assert read_file(box, path="logo.png") == "error: not a text file: logo.png"
    outside = tmp_path / "secret.txt"
    outside.write_text("secret\n")
    (box.path / "link.txt").symlink_to(outside)
    assert read_file(box, path="link.txt") == "error: path is outside the repository: link.txt"
    (box.path / "empty.py").write_text("")
    assert read_file(box, path="empty.py") == "(empty.py is empty)"


def test_search(box: Sandbox) -> None:
    found = search(box, pattern=r"def (parse_terms|parse_rate)\b").splitlines()
    assert found == [
        "tally/tax.py:59: def parse_rate(text: str) -> Decimal:",
        "tally/terms.py:69: def parse_terms(text: str) -> PaymentTerms:",
    ]
    only_tests = search(box, pattern="VolumeDiscount", path="tests").splitlines()
    assert only_tests and all(line.startswith("tests/") for line in only_tests)
    assert search(box, pattern="zzz_nothing") == "no matches for 'zzz_nothing' under ."
    assert search(box, pattern="(unclosed").startswith("error: bad regular expression '(unclosed'")
    assert search(box, pattern="x", path="../").startswith("error: path is outside the repository")
    assert search(box, pattern="x", path="missing") == "error: no such file or directory: missing"


def test_search_is_capped(box: Sandbox) -> None:
    (box.path / "big.txt").write_text("needle\n" * (MAX_MATCHES + 50))
    lines = search(box, pattern="needle", path="big.txt").splitlines()
    assert len(lines) == MAX_MATCHES + 1
    assert lines[0] == "big.txt:1: needle"
    assert lines[-1] == f"... (stopped at {MAX_MATCHES} matches; narrow the pattern or the path)"


def test_apply_patch(box: Sandbox) -> None:
    target = box.path / "tally" / "terms.py"
    before = target.read_text()
    diff = apply_patch(box, path="tally/terms.py", old="SATURDAY = 5\n", new="SATURDAY = 5  # Monday is 0\n")
    assert diff.startswith("--- a/tally/terms.py\n+++ b/tally/terms.py\n@@ ")
    assert "\n-SATURDAY = 5\n+SATURDAY = 5  # Monday is 0" in diff
    assert target.read_text() == before.replace("SATURDAY = 5\n", "SATURDAY = 5  # Monday is 0\n")


def test_apply_patch_errors_change_nothing(box: Sandbox) -> None:
    target = box.path / "tally" / "money.py"
    before = target.read_bytes()
    assert apply_patch(box, path="tally/money.py", old="no such text", new="x") == (
        "error: old text not found in tally/money.py "
        "(it must match exactly, whitespace included; read the file again)"
    )
    count = target.read_text().count("return Money(")
    assert count > 1
    assert apply_patch(box, path="tally/money.py", old="return Money(", new="return Money (") == (
        f"error: old text occurs {count} times in tally/money.py; add surrounding lines to pick one"
    )
    assert apply_patch(box, path="tally/money.py", old="", new="x").startswith("error: old must not be empty")
    assert apply_patch(box, path="tally/money.py", old="Money", new="Money").startswith("error: old and new")
    assert apply_patch(box, path="tally/ghost.py", old="a", new="b") == "error: no such file: tally/ghost.py"
    assert apply_patch(box, path="../README.md", old="a", new="b").startswith("error: path is outside")
    assert target.read_bytes() == before


def test_run_tests_reports_paths_inside_the_repository(box: Sandbox) -> None:
    output = run_tests(box)
    assert str(box.path) not in output
    assert 'File "tests/test_invoice.py", line ' in output


def test_run_tests_times_out(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    (box.path / "tests" / "test_slow.py").write_text(
        "import time\nimport unittest\n\n\nclass Slow(unittest.TestCase):\n"
        "    def test_sleeps(self):\n        time.sleep(30)\n"
    )
    assert run_tests(box, timeout_s=1.0).startswith("error: tests timed out after 1 s")
    # The default comes from the sandbox, else the module's constant.
    monkeypatch.setattr(runner, "TEST_TIMEOUT_S", 1.0)
    assert run_tests(box).startswith("error: tests timed out after 1 s")
    box.test_timeout_s = 0.5
    assert run_tests(box).startswith("error: tests timed out after 0.5 s")


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        (
            "read_file",
            '{"path": ',
            "error: arguments are not valid JSON: Expecting value at line 1 column 10",
        ),
        ("read_file", "[1, 2]", "error: arguments must be a JSON object, got list"),
        ("read_file", "{}", "error: bad arguments for read_file: missing argument(s) path"),
        ("read_file", '{"path": 3}', "error: bad arguments for read_file: path must be a string, got int"),
        (
            "read_file",
            '{"path": "a", "mode": "w"}',
            "error: bad arguments for read_file: unexpected argument(s) mode; expected path",
        ),
        (
            "apply_patch",
            '{"patch": "--- a/x\\n+++ b/x"}',
            "error: bad arguments for apply_patch: unexpected argument(s) patch; expected path, old, new",
        ),
        (
            "rm_rf",
            "{}",
            "error: unknown tool 'rm_rf' (available: list_files, read_file, search, apply_patch, run_tests)",
        ),
    ],
)
def test_run_tool_errors(box: Sandbox, name: str, arguments: str, error: str) -> None:
    assert run_tool(box, name, arguments) == error


def test_run_tool_dispatches(box: Sandbox) -> None:
    assert run_tool(box, "read_file", '{"path": "README.md"}') == read_file(box, path="README.md")
    # Non-strict clients may leave out a path that has a default, or send no arguments at all.
    assert run_tool(box, "list_files", "{}") == list_files(box)
    assert run_tool(box, "list_files", "") == list_files(box)


# ---------------------------------------------------------------- (d) specs and schemas


def test_tool_specs_follow_strict_mode() -> None:
    assert [spec["name"] for spec in TOOL_SPECS] == list(TOOLS)
    for spec in TOOL_SPECS:
        assert spec["type"] == "function" and spec["strict"] is True and spec["description"]
        params = spec["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert params["required"] == list(params["properties"])
        assert all(prop["type"] == "string" and prop["description"] for prop in params["properties"].values())


@pytest.mark.parametrize("index", range(len(CALLS)))
def test_scenario_calls_validate_against_their_specs(index: int) -> None:
    call = CALLS[index]
    jsonschema.validate(call["arguments"], SPECS_BY_NAME[call["name"]]["parameters"])


def test_schema_validation_catches_what_strict_mode_forbids() -> None:
    schema = SPECS_BY_NAME["search"]["parameters"]
    for bad in ({"pattern": "x"}, {"pattern": "x", "path": ".", "flags": "i"}, {"pattern": 1, "path": "."}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# ---------------------------------------------------------------- (e) instructions


def test_instructions_are_about_8k_tokens() -> None:
    text = (DATA_DIR / SCENARIO["instructions_file"]).read_text()
    assert 7_500 <= len(encode_text(text)) <= 8_500
    for name in TOOLS:
        assert f"`{name}(" in text


# ---------------------------------------------------------------- (f) the original stays untouched


def test_the_sandbox_leaves_the_sample_repo_untouched() -> None:
    before = tree_digest(SAMPLE_REPO)
    with Sandbox() as sandbox:
        for call in PATCHES:
            run_tool(sandbox, call["name"], args(call))
        (sandbox.path / "scratch.txt").write_text("agent notes\n")
        assert run_tests(sandbox).endswith("(passed)")
    assert tree_digest(SAMPLE_REPO) == before
    assert not any(p.name == "__pycache__" for p in SAMPLE_REPO.rglob("*"))
    # The bug is still there for the next run.
    assert PATCHES[0]["arguments"]["old"] in (SAMPLE_REPO / PATCHES[0]["arguments"]["path"]).read_text()


# ---------------------------------------------------------------- (g) staying in the sandbox

PATH_TOOLS = {
    "list_files": {},
    "read_file": {},
    "search": {"pattern": "x"},
    "apply_patch": {"old": "a", "new": "b"},
}


@pytest.mark.parametrize("name", list(PATH_TOOLS))
@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("tally/\0money.py", "error: path contains a NUL byte: 'tally/\\x00money.py'"),
        ("\ud800.py", "error: path is not a valid file name: '\\ud800.py'"),
    ],
)
def test_unusable_paths_come_back_as_errors(box: Sandbox, name: str, path: str, error: str) -> None:
    assert TOOLS[name](box, path=path, **PATH_TOOLS[name]) == error
    # As the model sends them: JSON escapes for the NUL byte and the lone surrogate.
    arguments = json.dumps({"path": path, **PATH_TOOLS[name]})
    assert run_tool(box, name, arguments) == error


def test_a_text_that_cannot_be_written_is_an_error_and_changes_nothing(box: Sandbox) -> None:
    target = box.path / "tally" / "terms.py"
    before = target.read_bytes()
    output = apply_patch(box, path="tally/terms.py", old="SATURDAY = 5", new="SATURDAY = \ud800")
    assert output.startswith("error: 'utf-8' codec can't encode"), output
    assert target.read_bytes() == before


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the sandbox with a secret in it."""
    root = tmp_path / "outside"
    root.mkdir()
    (root / "secret.txt").write_text("TOPSECRET = 1\n")
    return root


def test_symlinks_out_of_the_sandbox_are_refused_or_skipped(box: Sandbox, outside: Path) -> None:
    (box.path / "linked_dir").symlink_to(outside, target_is_directory=True)
    (box.path / "linked_secret.py").symlink_to(outside / "secret.txt")
    (box.path / "tally" / "alias.py").symlink_to(box.path / "tally" / "money.py")  # stays inside
    (box.path / "loop").symlink_to(box.path, target_is_directory=True)

    listing = list_files(box).splitlines()
    assert "tally/alias.py" in listing and "tally/money.py" in listing
    assert not [p for p in listing if p.startswith(("linked", "loop"))], listing
    assert list_files(box, path="linked_dir") == "error: path is outside the repository: linked_dir"

    assert search(box, pattern="TOPSECRET") == "no matches for 'TOPSECRET' under ."
    assert search(box, pattern="x", path="linked_dir").startswith("error: path is outside the repository")
    assert search(box, pattern="x", path="linked_secret.py").startswith("error: path is outside")
    money = search(box, pattern=r"^class Money\b").splitlines()
    assert [line.split(":")[0] for line in money] == ["tally/alias.py", "tally/money.py"]

    for path in ("linked_secret.py", "linked_dir/secret.txt"):
        assert read_file(box, path=path) == f"error: path is outside the repository: {path}"
        patched = apply_patch(box, path=path, old="TOPSECRET", new="CHANGED")
        assert patched == f"error: path is outside the repository: {path}"
    assert (outside / "secret.txt").read_text() == "TOPSECRET = 1\n"


def test_hard_links_and_fifos_are_not_read_or_written(box: Sandbox, outside: Path) -> None:
    try:
        os.link(outside / "secret.txt", box.path / "hard.py")
    except OSError:
        pytest.skip("the sandbox and the test's temporary directory are on different file systems")
    assert read_file(box, path="hard.py") == (
        "error: hard.py has other hard links; the tools do not read or write through them"
    )
    assert apply_patch(box, path="hard.py", old="TOPSECRET", new="CHANGED").startswith("error: hard.py has")
    assert search(box, pattern="TOPSECRET") == "no matches for 'TOPSECRET' under ."
    assert (outside / "secret.txt").read_text() == "TOPSECRET = 1\n"

    os.mkfifo(box.path / "pipe")  # reading it would block the tool forever
    assert read_file(box, path="pipe") == "error: no such file: pipe"
    assert "pipe" not in list_files(box).splitlines()
    assert search(box, pattern="nothing-matches-this") == "no matches for 'nothing-matches-this' under ."


def repo_with_test(tmp_path: Path, body: str) -> Path:
    """A tiny repository whose only test runs ``body`` (indented into a test method)."""
    repo = tmp_path / "probe_repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "__init__.py").write_text("")
    indented = textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)
    (repo / "tests" / "test_probe.py").write_text(
        "import os\nimport pathlib\nimport subprocess\nimport sys\nimport unittest\n\n\n"
        f"class Probe(unittest.TestCase):\n    def test_probe(self):\n{indented}"
    )
    return repo


def test_the_test_run_sees_no_secret_of_the_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABKIT_SECRET_TEST", "s3cret-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    repo = repo_with_test(
        tmp_path,
        """
        print("seen:", os.environ.get("LABKIT_SECRET_TEST"))
        print("names:", " ".join(sorted(os.environ)))
        """,
    )
    with Sandbox(repo) as sandbox:
        output = run_tests(sandbox)
    assert output.endswith("exit status: 0 (passed)"), output
    assert "seen: None" in output
    assert "s3cret-value" not in output and "sk-should-not-leak" not in output
    names = set(labelled(output, "names:").split())
    python = {"PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONUNBUFFERED"}
    assert names <= {*runner.TEST_ENV_KEEP, "HOME", "TMPDIR", "TMP", "TEMP", *python}, names


def test_the_test_run_writes_home_and_temp_files_inside_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_home = tmp_path / "real_home"
    real_home.mkdir()
    monkeypatch.setenv("HOME", str(real_home))
    repo = repo_with_test(
        tmp_path,
        """
        import tempfile
        home = pathlib.Path(os.path.expanduser("~"))
        print("existed:", (home / ".planted").exists())
        (home / ".planted").write_text("x")
        print("home:", home)
        print("temp:", tempfile.gettempdir())
        """,
    )
    with Sandbox(repo) as sandbox:
        output = run_tests(sandbox)
        assert output.endswith("exit status: 0 (passed)"), output
        home = Path(labelled(output, "home:"))
        assert home.is_relative_to(sandbox.root) and not home.is_relative_to(sandbox.path)
        assert (home / ".planted").is_file()
        assert Path(labelled(output, "temp:")).is_relative_to(sandbox.root)
        assert ".planted" not in list_files(sandbox)  # the tools see the repository only
        assert labelled(run_tests(sandbox), "existed:") == "False"  # each run starts a fresh HOME
    assert list(real_home.iterdir()) == []


def labelled(output: str, label: str) -> str:
    """What the test printed after ``label`` on a line of its own."""
    return next(line for line in output.splitlines() if line.startswith(label)).split(" ", 1)[1]


@pytest.mark.skipif(confine.landlock_abi() < 1, reason="the kernel has no Landlock")
def test_the_test_run_cannot_write_outside_the_sandbox(tmp_path: Path) -> None:
    target = tmp_path / "written-by-the-tests.txt"
    repo = repo_with_test(
        tmp_path,
        f"""
        try:
            pathlib.Path({str(target)!r}).write_text("x")
            print("wrote it")
        except PermissionError:
            print("refused")
        """,
    )
    with Sandbox(repo) as sandbox:
        output = run_tests(sandbox)
    assert "refused" in output and "wrote it" not in output, output
    assert not target.exists()


@pytest.mark.skipif(confine.landlock_abi() < 4, reason="the kernel's Landlock does not cover TCP")
def test_the_test_run_cannot_connect_over_tcp(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        repo = repo_with_test(
            tmp_path,
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
                print("connected")
            except PermissionError:
                print("refused")
            """,
        )
        with Sandbox(repo) as sandbox:
            output = run_tests(sandbox)
    assert "refused" in output and "connected" not in output, output


def test_the_test_run_has_resource_limits(tmp_path: Path) -> None:
    repo = repo_with_test(
        tmp_path,
        """
        import resource
        for name in ("RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_CORE"):
            print(name, *resource.getrlimit(getattr(resource, name)))
        """,
    )
    with Sandbox(repo) as sandbox:
        output = run_tests(sandbox, timeout_s=7.5)
    fsize = runner.TEST_LIMITS["RLIMIT_FSIZE"]
    assert f"RLIMIT_FSIZE {fsize} {fsize}" in output, output
    assert "RLIMIT_CPU 9 9" in output  # the CPU backstop: the time limit rounded up, plus one
    assert "RLIMIT_CORE 0 0" in output


def spawn_sleeper(pid_file: str) -> str:
    """Test code that starts a process meant to outlive the run and records its pid."""
    return textwrap.dedent(f"""
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pathlib.Path({pid_file!r}).write_text(str(child.pid))
        """)


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie nobody reaped has ended too)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def wait_gone(pid: int) -> bool:
    for _ in range(100):  # SIGKILL is immediate; allow the kernel a moment to tear it down
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_an_endless_test_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    repo = repo_with_test(tmp_path, spawn_sleeper("sleeper.pid") + "\nwhile True:\n    pass\n")
    with Sandbox(repo) as sandbox:
        output = run_tests(sandbox, timeout_s=1.0)
        pid = int((sandbox.path / "sleeper.pid").read_text())
    assert output.startswith("error: tests timed out after 1 s"), output
    assert wait_gone(pid)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_process_left_running_by_passing_tests_is_stopped(tmp_path: Path) -> None:
    repo = repo_with_test(tmp_path, spawn_sleeper("sleeper.pid"))
    with Sandbox(repo) as sandbox:
        # The sleeper keeps the output open; the call must still end when the tests do.
        output = run_tests(sandbox, timeout_s=60)
        pid = int((sandbox.path / "sleeper.pid").read_text())
    assert output.endswith("exit status: 0 (passed)"), output
    assert wait_gone(pid)
