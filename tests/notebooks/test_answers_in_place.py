"""Answers sit where the learner is: collapsed after each question, and a graded self-check.

Reads the notebooks' structure only (no kernel): every ``<details>`` is closed and opens with a
summary; every "Try this" and every "Questions" section is followed by a collapsed answer;
no answer is left visible; each story notebook ends with a self-check graded by
``lab.self_check``, its guesses ``None`` so that Run All works.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labkit.analysis.guesses import Undecided, self_check

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
# The notebooks that carry their answers in place.
ANSWERED = ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10"]
SELF_CHECKED = ["01", "02", "03", "04"]  # the story notebooks that must end with a self-check
ANSWER = "<details><summary>Answer (open it when you have tried)</summary>"
_TAG = re.compile(r"</?details>|<summary>.*?</summary>", re.S)


def cells(number: str) -> list[dict]:
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def sections(number: str) -> list[tuple[str, str]]:
    """Each ``## `` section of the notebook's markdown: (heading, the markdown up to the next)."""
    markdown = "\n".join(source(c) for c in cells(number) if c["cell_type"] == "markdown")
    parts = re.split(r"^(## .*)$", markdown, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name[:2])
def test_every_details_is_closed_and_opens_with_a_summary(path: Path) -> None:
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        tags = [
            t if t.startswith("</") or t == "<details>" else "<summary>" for t in _TAG.findall(source(cell))
        ]
        depth, expect_summary = 0, False
        for tag in tags:
            assert not expect_summary or tag == "<summary>", (
                f"{path.name} {cell['id']}: <details> without summary"
            )
            expect_summary = tag == "<details>"
            depth += {"<details>": 1, "</details>": -1}.get(tag, 0)
            assert depth >= 0, f"{path.name} {cell['id']}: </details> before its <details>"
        assert depth == 0 and not expect_summary, f"{path.name} {cell['id']}: a <details> is left open"


@pytest.mark.parametrize("number", ANSWERED)
def test_every_try_this_and_every_questions_section_has_its_answer_collapsed(number: str) -> None:
    asked = [(h, body) for h, body in sections(number) if h.startswith(("## Try this", "## Questions"))]
    assert asked, f"notebook {number} asks nothing"
    for heading, body in asked:
        assert ANSWER in body, f"notebook {number}, {heading!r}: no collapsed answer before the next section"
    for cell in cells(number):
        text = source(cell)
        visible = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
        assert "**Answer.**" not in visible, f"notebook {number} {cell['id']}: an answer left open"


@pytest.mark.parametrize(
    "number", sorted({*SELF_CHECKED, *(p.name[:2] for p in ALL if "## Self-check" in p.read_text())})
)
def test_a_story_notebook_ends_with_a_self_check_graded_in_the_learners_terms(number: str) -> None:
    notebook = cells(number)
    starts = [i for i, c in enumerate(notebook) if source(c).startswith("## Self-check")]
    assert len(starts) == 1, f"notebook {number} has no self-check section"
    after = notebook[starts[0] + 1 :]
    guesses, grading = after[0], after[1]
    assert guesses["cell_type"] == grading["cell_type"] == "code"
    assigned = re.findall(r"^(\w+) = (.+?)(?:\s+#.*)?$", source(guesses), flags=re.M)
    assert 4 <= len(assigned) <= 5 and all(value == "None" for _, value in assigned), assigned
    assert "lab.self_check(" in source(grading)
    assert all(name in source(grading) for name, _ in assigned), "a self-check answer is never graded"
    rest = [source(c).strip() for c in after[2:] if c["cell_type"] == "code"]
    assert rest in ([], ["server.close()"]), f"notebook {number}: the self-check is not its last step"
    assert ANSWER in "".join(source(c) for c in after[2:]), (
        f"notebook {number}: the self-check's answers are not collapsed below it"
    )


def test_the_tally_counts_right_and_close_and_names_what_it_could_not_grade() -> None:
    lines = self_check(
        [
            dict(guess="stays the same", measured="stays flat", what="the API's seconds"),
            dict(guess=0.65, measured=0.58, what="the API's share"),
            dict(guess=0.9, measured=0.58, what="the share at 4,000 tokens/s"),
            dict(guess="larger", measured=Undecided("too close", ("larger", "smaller")), what="the gap"),
            dict(guess=None, measured="render", what="the stage"),
        ]
    )
    assert [line.split(". ", 1)[0] for line in lines[:5]] == ["1", "2", "3", "4", "5"]
    assert (
        lines[-1]
        == "2 of 5 right or close (1 left empty: set it above and run again; 1 this run could not decide)."
    )
