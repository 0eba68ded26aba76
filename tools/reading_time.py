"""How long a learner takes to read and run each notebook: an estimate, from the notebook itself.

The rule, stated once (the README's learning path and the guide's table give its results):

- every word of Markdown at ``WORDS_A_MINUTE``, the collapsed answers included (a diagram's
  Mermaid text is not counted: its picture says it; nor are the code's comments: a learner runs
  a cell and reads what it prints, which the prose explains);
- ``THINKING_MIN`` for each prediction (a ``guess_... = None`` line) and for each numbered
  question under ``## Questions``, the time to think before opening the answer;
- ``SELF_CHECK_MIN`` for the self-check at the end (``## Self-check``);
- the cells' run time, measured in JupyterLab on a busy 2-core machine (the guide's table);
- an exercise (from a ``## Exercise`` heading to the next ``## ``) is counted apart, at
  ``EXERCISE_MIN`` with its instructions, hint and solution: it is work, not reading.

No learner has been timed: this says how the notebooks compare, and which one is too long.

    python tools/reading_time.py            # the guide's table, from the notebooks as they are

The run times are the guide's own measurements: the tool reads them from the guide's table, so
after a notebook changes its output replaces that table (a new run time is edited in the guide).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
GUIDE = NOTEBOOKS / "README.md"
WORDS_A_MINUTE = 200
THINKING_MIN = 1.0
SELF_CHECK_MIN = 3.0
EXERCISE_MIN = 10.0
DIAGRAM = re.compile(r"<details><summary>The diagram as text.*?</details>", re.S)
GUESS = re.compile(r"^guess_\w+ = None", re.M)
HEADING = re.compile(r"^## (.+)$", re.M)
QUESTION = re.compile(r"^\d+\. ", re.M)
HEADER = (
    "| notebook | words | predictions and questions | self-check | exercises | run, JupyterLab busy "
    "| reading and running |\n|---|---:|---:|---|---:|---:|---:|"
)
# A row of the guide's table: notebook, words, predictions and questions, self-check, exercises,
# run seconds, minutes.
ROW = re.compile(
    r"^\| \[?(\d\d)\]?[^|]* \| ([\d,]+) \| (\d+) \| (yes|) \| (\d) \| (\d+) s \| about (\d+) min \|$", re.M
)


@dataclass(frozen=True)
class Reading:
    """What a learner reads and does in one notebook."""

    name: str
    words: int  # Markdown outside the exercises, answers included
    predictions: int
    questions: int
    self_check: bool
    exercises: int

    def minutes(self, run_s: float) -> float:
        """Reading and running, given the cells' run time (seconds); the exercises apart."""
        return (
            self.words / WORDS_A_MINUTE
            + (self.predictions + self.questions) * THINKING_MIN
            + (SELF_CHECK_MIN if self.self_check else 0.0)
            + run_s / 60
        )


def reading(path: Path) -> Reading:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    words = predictions = questions = exercises = 0
    self_check = in_exercise = False
    for cell in cells:
        source = "".join(cell["source"])
        headings = HEADING.findall(source)
        if headings:
            in_exercise = headings[-1].startswith("Exercise")
            exercises += sum(h.startswith("Exercise") for h in headings)
            self_check = self_check or "Self-check" in headings
        if in_exercise:
            continue
        if cell["cell_type"] == "code":
            predictions += len(GUESS.findall(source))
            continue
        words += len(re.findall(r"\w+", DIAGRAM.sub("", source)))
        if "Questions" in headings:
            questions += len(QUESTION.findall(source[source.index("## Questions") :]))
    return Reading(path.stem, words, predictions, questions, self_check, exercises)


def readings() -> list[Reading]:
    return [reading(path) for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))]


def guide_rows(text: str | None = None) -> dict[str, tuple[str, ...]]:
    """The guide's table, by notebook number: its columns after the number, as written."""
    text = GUIDE.read_text(encoding="utf-8") if text is None else text
    return {row[0]: row[1:] for row in ROW.findall(text)}


def guide_row(r: Reading, run_s: int) -> str:
    """``r``'s row of the guide's table, given its run time (seconds)."""
    self_check = "yes" if r.self_check else ""
    thinking = r.predictions + r.questions
    return (
        f"| {r.name[:2]} | {r.words:,} | {thinking} | {self_check} | {r.exercises} | {run_s} s |"
        f" about {round(r.minutes(run_s))} min |"
    )


def main() -> int:
    run_s = {number: int(row[4]) for number, row in guide_rows().items()}
    print(HEADER)
    for r in readings():
        print(guide_row(r, run_s[r.name[:2]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
