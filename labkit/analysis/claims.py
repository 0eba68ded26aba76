"""A notebook's checked claims: what its text asserts, checked against what ran, in one sentence.

A lesson says things like "the API's share jumps at 1,000 tokens/s" in Markdown. The cell that
measures it calls ``claim`` with the claim, whether this run bears it out, and the evidence.
The learner reads one sentence; the output also carries the verdict in a mime type of its
own, so ``benchmarks/lesson_claims.py`` can run a notebook many times and count, per claim,
how often it held.

    >>> c = Claim("the API's share jumps", True, "Checked on this run: ...")
    >>> c.bundle()["text/plain"]
    'Checked on this run: ...'
    >>> c.bundle()[MIME]["holds"]
    True

``holds`` is ``None`` when the run cannot decide (the effect is within the noise): the sentence
then says so, and the count keeps it apart from a claim that failed. A claim of several parts
("about the same milliseconds, so a larger share") passes one verdict per part: it holds when
every part does, fails when any part fails, and otherwise cannot tell.

    >>> verdict([True, None]), verdict([None, False]), verdict([True, True])
    (None, False, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MIME = "application/vnd.labkit.claim+json"


@dataclass(frozen=True)
class Claim:
    """One checked claim of a notebook: its name, the verdict of this run, the sentence shown."""

    name: str
    holds: bool | None
    sentence: str

    def bundle(self) -> dict[str, Any]:
        """The display bundle: the sentence for every front end, the verdict for the counter."""
        return {"text/plain": self.sentence, MIME: {"name": self.name, "holds": self.holds}}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle()


def verdict(holds: bool | Sequence[bool | None] | None) -> bool | None:
    """One verdict from a claim's parts: ``False`` if any part failed, else ``None`` if any part
    could not be decided, else ``True``. A single verdict is itself (any truth value, as bool)."""
    if holds is None or not isinstance(holds, Sequence):
        return None if holds is None else bool(holds)
    parts = [verdict(part) for part in holds]
    if False in parts:
        return False
    return None if None in parts else True


def claim(name: str, holds: bool | Sequence[bool | None] | None, evidence: str) -> None:
    """Show whether the claim ``name`` held in this run, with the ``evidence``, and record it.
    ``holds`` may list one verdict per part of the claim (``verdict``).

        lab.claim("the socket saves more against naive than against the sprint",
                  vs_naive > vs_sprint, f"{vs_naive:.0%} against naive, {vs_sprint:.0%} against the sprint")
        lab.claim("about the same milliseconds, a larger share", [same_ms, larger_share], evidence)
    """
    from IPython.display import display

    held = verdict(holds)
    made = Claim(name, held, sentence(name, held, evidence))
    display(made.bundle(), raw=True)  # nothing returned: a cell ending in a claim shows it once


def sentence(name: str, holds: bool | None, evidence: str) -> str:
    """The line a learner reads.

    >>> sentence("the share jumps", True, "22% at 65 tokens/s, 51% at 1,000")
    'Checked on this run: the share jumps: holds (22% at 65 tokens/s, 51% at 1,000).'
    >>> sentence("the lead grows", None, "a gap of 2 points, runs within ±4")
    'Checked on this run: the lead grows: cannot tell (a gap of 2 points, runs within ±4).'
    """
    verdict = "cannot tell" if holds is None else "holds" if holds else "does NOT hold"
    return f"Checked on this run: {name}: {verdict} ({evidence})."


def found(outputs: Iterable[dict[str, Any]]) -> list[Claim]:
    """The claims recorded in a notebook's outputs (an executed notebook's cells, flattened).

    >>> found([{"output_type": "display_data", "data": Claim("x", False, "No.").bundle()}])
    [Claim(name='x', holds=False, sentence='No.')]
    """
    claims = []
    for output in outputs:
        data = output.get("data", {})
        if MIME in data:
            record = data[MIME]
            claims.append(Claim(record["name"], record["holds"], data.get("text/plain", "")))
    return claims
