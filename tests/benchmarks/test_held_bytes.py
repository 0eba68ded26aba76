"""``benchmarks/held_bytes.py``, reduced: 4 lanes x 4 injects of 1.9 MB, two floods on a server of its own.

What is checked is that its report adds up: every frame of a flood is held or refused, what the
first holds fits the connection's bound, the second is refused whole, and the share it prints is
the growth it measured over the bytes it sent. The growth itself depends on the machine's load,
so no figure of it is asserted.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_script

LANES, INJECTS, CHARS = 4, 4, 1_900_000  # 30 MB a flood: past the 16 MiB bound, in a second or two
CONNECTION_BOUND = 16 * 1024 * 1024


def test_the_benchmarks_report_adds_up(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("benchmarks/held_bytes.py")
    bench.main(["--lanes", str(LANES), "--injects", str(INJECTS), "--inject-chars", str(CHARS), "--json"])
    [run] = json.loads(capsys.readouterr().out)
    frames = LANES * INJECTS
    assert run["frames_per_flood"] == frames and run["bytes_per_flood"] > frames * CHARS
    assert run["held_first"] + run["refused_first"] == frames
    assert 0 < run["held_first"] * CHARS <= CONNECTION_BOUND < frames * CHARS
    assert run["refused_second"] == frames  # the bound is full: the second flood is refused whole
    assert run["share_of_sent"] == run["grown_second_kb"] * 1024 / run["bytes_per_flood"]
    assert run["under_half"] == (run["share_of_sent"] < 0.5)


def test_the_table_says_whether_the_growth_is_under_one_half(capsys: pytest.CaptureFixture[str]) -> None:
    load_script("benchmarks/held_bytes.py").main(["--lanes", "2", "--injects", "2", "--inject-chars", "1000"])
    header, *rows = (line for line in capsys.readouterr().out.splitlines() if line.startswith("| "))
    assert header.endswith("| second / sent | under one half |")
    [row] = rows
    assert row.startswith("| 1 | 4 of 4 | 0, 0 |") and row.split("|")[-2].strip() in ("yes", "no")
