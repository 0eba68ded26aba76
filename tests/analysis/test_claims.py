"""A lesson's checked claims: shown as one sentence, carried in the output for the counter, and read
back from an executed notebook by ``benchmarks/lesson_claims.py``."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from labkit.analysis import claims

pytestmark = pytest.mark.slow  # notebooks in real kernels


def test_a_claim_is_a_sentence_and_a_verdict_in_one_output() -> None:
    made = claims.Claim("the share jumps", True, claims.sentence("the share jumps", True, "22%, then 51%"))
    bundle = made.bundle()
    assert bundle["text/plain"] == "Checked on this run: the share jumps: holds (22%, then 51%)."
    assert bundle[claims.MIME] == {"name": "the share jumps", "holds": True}
    assert "does NOT hold" in claims.sentence("x", False, "y")
    assert "cannot tell" in claims.sentence("x", None, "y")


def test_claims_are_read_back_from_an_executed_notebook(tmp_path) -> None:
    """A real kernel runs ``lab.claim``; the executed notebook carries each verdict once."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("from labkit import lab"),
        nbformat.v4.new_code_cell('lab.claim("one", 2 > 1, "more")\nlab.claim("two", None, "too noisy")'),
        nbformat.v4.new_code_cell('lab.claim("three", 1 > 2, "one is less")'),
        nbformat.v4.new_code_cell('lab.claim("four", [True, None], "one part too noisy")'),
    ]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    found = claims.found(outputs)
    verdicts = [(c.name, c.holds) for c in found]
    assert verdicts == [("one", True), ("two", None), ("three", False), ("four", None)]
    assert found[2].sentence == "Checked on this run: three: does NOT hold (one is less)."


@pytest.mark.parametrize(
    ("parts", "held"),
    [
        ([True, True], True),
        ([True, None], None),
        ([None, False], False),  # a part that failed fails the claim, whatever the others
        ([False, True], False),
        ([], True),
        (True, True),
        (None, None),
        (0, False),
    ],
)
def test_a_claim_of_several_parts_holds_only_when_every_part_does(parts: object, held: bool | None) -> None:
    """Notebook 04's check said 'holds' beside numbers that contradicted half of its sentence:
    a claim of two parts needs a verdict for each."""
    assert claims.verdict(parts) is held
