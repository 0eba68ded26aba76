"""What every exercise shares: the skeleton-or-reference hand-off and the one-sentence verdict.

- ``mine_or_reference``: the learner's code, or labkit's reference with one line saying so;
- ``Verdict``: the check's one sentence (every rule kept, or the first rule broken and what it
  costs), shown as the cell's output and kept for the notebook's own checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def is_skeleton(attempt: Callable[[], object]) -> bool:
    """Whether calling ``attempt`` stops at the skeleton's ``NotImplementedError``.

    >>> def skeleton(): raise NotImplementedError("write me")
    >>> is_skeleton(skeleton), is_skeleton(lambda: 42)
    (True, False)
    """
    try:
        attempt()
    except NotImplementedError:
        return True
    except Exception:  # written, if wrongly: the check says what went wrong
        return False
    return False


def mine_or_reference(mine: T, reference: T, what: str, probe: Callable[[T], object] | None = None) -> T:
    """``mine`` once it is written, else ``reference``, saying so in one line.

    ``probe`` calls ``mine`` the cheapest way that reaches its body (default: with no argument);
    a body that raises ``NotImplementedError`` is the skeleton.

    >>> def skeleton(): raise NotImplementedError
    >>> mine_or_reference(skeleton, reference=len, what="counter") is len  # doctest: +ELLIPSIS
    Your counter is still the skeleton: this run uses labkit's reference in its place (...).
    True
    """
    attempt = (lambda: probe(mine)) if probe is not None else mine  # type: ignore[operator]
    if is_skeleton(attempt):
        print(
            f"Your {what} is still the skeleton: this run uses labkit's reference in its place "
            "(write yours, then run this cell again)."
        )
        return reference
    return mine


@dataclass
class Verdict:
    """An exercise's check: the rules the learner's code kept, and each one it broke, in a sentence.

    >>> Verdict("connection cache", kept=["a follow-up is served"]).sentence
    'Checked your connection cache: right on every rule (a follow-up is served).'
    >>> Verdict("connection cache", broken=["turn 3 missed", "a fork was lost"]).sentence
    'Checked your connection cache: turn 3 missed (and 1 more below).'
    """

    what: str
    kept: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    @property
    def right(self) -> bool:
        return not self.broken

    @property
    def sentence(self) -> str:
        if self.right:
            return f"Checked your {self.what}: right on every rule ({'; '.join(self.kept)})."
        more = f" (and {len(self.broken) - 1} more below)" if len(self.broken) > 1 else ""
        return f"Checked your {self.what}: {self.broken[0]}{more}."

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.sentence + "".join(f"\n  - {rule}" for rule in self.broken[1:]))

    def __str__(self) -> str:
        return self.sentence
