"""Running a learner's append once: stopped if it runs too long, its tokenizer work counted.

``call_append`` hands the learner's function copies of one step's cached ids and new items and
keeps what came back (``Outcome``): the ids, or the error, or that it had not returned within the
limit, and how many tokens labkit's tokenizer produced meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from labkit.analysis.exercises.append_cases import Step
from labkit.api.items import Item
from labkit.deadline import alarm, interrupts_here
from labkit.text.tokenizer import encoding

Append = Callable[[list[int], list[Item]], list[int]]


class _TooSlow(BaseException):  # not an Exception: a learner's ``except Exception`` cannot swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Stop the code inside after ``seconds`` (``_TooSlow``), where a timer signal can: the main
    thread of a POSIX process, as a notebook's kernel runs cells. Elsewhere it does not stop it."""
    if not interrupts_here():
        yield
        return
    with alarm(seconds, _TooSlow):
        yield


@contextlib.contextmanager
def counting_tokens() -> Iterator[list[int]]:
    """Count the tokens labkit's tokenizer produces inside (``encode_text``, ``encode_rendered`` and
    the encoding's own methods all count): ``[n]`` once the block ends."""
    enc, count = encoding(), [0]
    names = ("encode", "encode_ordinary", "encode_batch", "encode_ordinary_batch")

    def counted(method: Callable[..., Any], batch: bool) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ids = method(*args, **kwargs)
            count[0] += sum(map(len, ids)) if batch else len(ids)
            return ids

        return wrapper

    for name in names:
        setattr(enc, name, counted(getattr(enc, name), batch=name.endswith("batch")))
    try:
        yield count
    finally:
        for name in names:
            delattr(enc, name)  # the instance's wrappers go; the class's methods show again


@dataclass
class Outcome:
    """One call of the learner's function: what it returned, or how it failed, and its work."""

    got: object = None
    error: Exception | None = None
    too_slow: bool = False
    encoded: int = 0


def call_append(mine: Append, step: Step, limit_s: float) -> Outcome:
    outcome = Outcome()
    with counting_tokens() as encoded:
        try:
            with time_limit(limit_s):
                outcome.got = mine(list(step.cached), [dict(item) for item in step.new])
        except _TooSlow:
            outcome.too_slow = True
        except Exception as exc:  # the learner's code: any error becomes the verdict's sentence
            outcome.error = exc
    outcome.encoded = encoded[0]
    return outcome
