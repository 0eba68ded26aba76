"""The guide's table of how long each notebook takes agrees with the notebooks as they are, and no
story notebook asks more than about 25 minutes of a learner (``tools/reading_time.py`` states the
rule once); the README's learning path gives the same minutes.

Reads files only: the run times are the guide's own measurements (JupyterLab on a busy 2-core
machine), which no test can redo.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
STORY = ("01", "02", "03", "04")
STORY_LIMIT_MIN = 25


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_script("tools/reading_time.py")


def test_the_guides_table_is_the_notebooks_as_they_are(tool: ModuleType) -> None:
    rows = tool.guide_rows()
    readings = {r.name[:2]: r for r in tool.readings()}
    assert sorted(rows) == sorted(readings), "one row per notebook"
    for number, (words, thinking, self_check, exercises, run_s, minutes) in rows.items():
        r = readings[number]
        assert int(words.replace(",", "")) == r.words, f"{number}: the notebook has {r.words:,} words"
        assert int(thinking) == r.predictions + r.questions, number
        assert (self_check == "yes") == r.self_check, number
        assert int(exercises) == r.exercises, number
        assert int(minutes) == round(r.minutes(int(run_s))), f"{number}: {r.minutes(int(run_s)):.1f} min"


def test_no_story_notebook_asks_more_than_about_25_minutes(tool: ModuleType) -> None:
    rows = tool.guide_rows()
    assert {n: int(rows[n][-1]) for n in STORY if int(rows[n][-1]) > STORY_LIMIT_MIN} == {}


def test_the_readmes_learning_path_gives_the_guides_minutes(tool: ModuleType) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    path = dict(re.findall(r"^\| (\d\d) \|.*\| about (\d+) min[^|]*\|$", readme, re.M))
    assert path == {n: row[-1] for n, row in tool.guide_rows().items() if n != "07"}
