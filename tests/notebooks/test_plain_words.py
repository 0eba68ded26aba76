"""Notebook 08 is written for a learner who has not done statistics; 07 says first whose it is.

Reads the notebooks' markdown only (no kernel): 08's prose uses no fitting jargon outside code
(labkit's own names for the fit's terms appear once each, in backticks, beside a plain word), says
once that its fitted numbers are labkit's reading, refers the run's noise back to where it is
taught, and keeps its sentences short; 07's first cell tells a learner it may be skipped.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
JARGON = ("prior", "posterior", "leeway", "residual")  # each needs a plain word for a learner
WARNING = "every fitted number below is labkit's reading of the articles"


def markdown_cells(number: str) -> list[str]:
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    cells = json.loads(path.read_text())["cells"]
    return [re.sub(r"\s+", " ", "".join(c["source"])) for c in cells if c["cell_type"] == "markdown"]


def prose(text: str) -> str:
    """What a learner reads as words: code spans and tags left out.

    >>> prose("the `prior` is a <b>guess</b>")
    'the  is a  guess '
    """
    return re.sub(r"<[^>]+>", " ", re.sub(r"`[^`]*`", "", text))


def sentence_lengths(text: str) -> list[int]:
    """Words per sentence; a heading, a list item or a numbered question ends one.

    >>> sentence_lengths("## A title here - One two three. Four five six seven! **1.** Eight nine ten?")
    [3, 3, 4, 3]
    """
    units = re.split(r"\s(?=#+ |- |\*\*\d+\.\*\* )", prose(text))
    units = (re.sub(r"^[\s#*-]*(\d+\.\*\*)?\s*", "", unit) for unit in units)  # the marks, not words
    parts = (s for unit in units for s in re.split(r"(?<=[.!?])\s+", unit))
    return [len(s.split()) for s in parts if len(s.split()) >= 3]


def test_08_uses_no_fitting_jargon_outside_code_and_names_labkits_terms_once() -> None:
    cells = markdown_cells("08")
    words = prose(" ".join(cells))
    used = [term for term in JARGON if re.search(rf"\b{term}s?\b", words, flags=re.I)]
    assert not used, f"notebook 08 says {used} in its prose: give the plain word"
    for name in ("`prior`", "`residual`"):
        assert sum(cell.count(name) for cell in cells) == 1, f"{name} should be named once, in code"


def test_08_says_once_that_its_fitted_numbers_are_labkits_reading_not_openais() -> None:
    cells = markdown_cells("08")
    assert WARNING in cells[0] and "OpenAI published" in cells[0]
    assert sum(cell.count("OpenAI published") for cell in cells) == 1


def test_the_noise_is_taught_once_in_01_and_referred_back_to_after() -> None:
    taught = [
        n
        for n in ("01", "02", "03", "04", "05", "06", "08", "09", "10")
        if any("### Reading the noise" in cell for cell in markdown_cells(n))
    ]
    assert taught == ["01"]
    for number in ("02", "03", "04", "08"):
        assert any("*Reading the noise*" in cell for cell in markdown_cells(number)), number
    mentions = [cell for cell in markdown_cells("08") if "standard error" in cell]
    assert len(mentions) == 1 and "01's *Reading the noise*" in mentions[0]


def test_08_keeps_its_sentences_short() -> None:
    lengths = sentence_lengths(" ".join(markdown_cells("08")))
    assert statistics.mean(lengths) < 18, f"{statistics.mean(lengths):.1f} words a sentence on average"


def test_07_says_first_that_it_is_the_instructors_and_a_learner_may_skip_it() -> None:
    first = markdown_cells("07")[0]
    opening = first.split("## ")[0]
    assert "for whoever runs a room" in opening and "may skip it" in opening
