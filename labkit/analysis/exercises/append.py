"""Exercise 2, the rendered-token append: extend a cached token list with new items.

The sprint's render cache keeps a conversation's token ids and, each turn, tokenizes only the
items that are new (``labkit.engine.render``: ``TokenBuffer.append``). The learner writes that
step as a function, ``append_items(cached, new_items) -> ids``, and ``check_append`` runs it on
every turn of a real rollout and on the cases that break a naive append, against a full
re-render, and counts the tokens it had the tokenizer encode.

    conversation = rollout_conversation(server.base_url, lab.scenario("fix-failing-test"))
    check = check_append(append_items, conversation)
    # Checked your append_items: right on every rule (the same ids as a full re-render on ...).

Its parts, one concern each: the rollout it runs on (``append_rollout``), the steps and their
oracle, a full re-render, with the edge cases (``append_cases``), one call of the learner's
function, timed out and its tokenizer work counted (``append_calls``), and the sentences a wrong
append gets (``append_sentences``). This module puts them together.

>>> reference_append([1, 2], [{"type": "function_call_output", "call_id": "call_1", "output": "ok"}])
[1, 2, 100264, 14506, 1650, 851, 28, 6797, 62, 16, 100266, 564, 100265]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.analysis.exercises.append_calls import Append, Outcome, call_append, counting_tokens, time_limit
from labkit.analysis.exercises.append_cases import EDGE_CASES, MARKUP_TEXT, Step, full_render, steps
from labkit.analysis.exercises.append_rollout import Conversation, rollout_conversation
from labkit.analysis.exercises.append_sentences import failure_sentence, too_much_work
from labkit.analysis.exercises.common import Verdict, mine_or_reference
from labkit.api.items import Item
from labkit.engine.render import TokenBuffer

__all__ = [  # the exercise's names, importable here whichever part defines them
    "EDGE_CASES",
    "LIMIT_S",
    "MARKUP_TEXT",
    "Append",
    "AppendCheck",
    "Conversation",
    "Step",
    "check_append",
    "counting_tokens",
    "full_render",
    "reference_append",
    "rollout_conversation",
    "steps",
    "time_limit",
]

LIMIT_S = 5.0  # seconds one call may take: the reference takes milliseconds on the longest turn


def reference_append(cached: list[int], new_items: list[Item]) -> list[int]:
    """labkit's own append: what the render cache does (``TokenBuffer.append``), on a copy."""
    buffer = TokenBuffer("cached", ids=list(cached))
    buffer.append(new_items)
    return list(buffer.ids)


@dataclass
class AppendCheck:
    """What ``check_append`` found: the verdict (None when the skeleton was left in place), the
    function the rest of the notebook uses (the learner's once its ids are right, else labkit's
    reference, and ``stand_in`` says why), and the work of the rollout's last turn."""

    verdict: Verdict | None
    used: Append
    stand_in: str = ""  # why labkit's reference stands in for the learner's function, if it does
    last_turn: dict[str, int] = field(default_factory=dict)

    @property
    def reference(self) -> bool:
        return bool(self.stand_in)

    def work_sentence(self) -> str:
        """The last turn's work, in words.

        >>> AppendCheck(None, reference_append, "yours is still the skeleton", {"cached": 900,
        ...     "added": 100, "encoded": 94, "full": 994}).work_sentence()  # doctest: +NORMALIZE_WHITESPACE
        "On the rollout's last turn labkit's reference (yours is still the skeleton) added 100 ids to
        the 900 cached: it had the tokenizer encode 94 tokens, where a full re-render encodes 994."
        """
        who = f"labkit's reference ({self.stand_in})" if self.stand_in else "your append_items"
        w = self.last_turn
        return (
            f"On the rollout's last turn {who} added {w['added']:,} ids to the {w['cached']:,} cached: "
            f"it had the tokenizer encode {w['encoded']:,} tokens, where a full re-render encodes "
            f"{w['full']:,}."
        )


def _last_turn(step: Step, encoded: int) -> dict[str, int]:
    return {
        "cached": len(step.cached),
        "added": len(step.expected) - len(step.cached),
        "encoded": encoded,
        "full": len(step.expected),  # what tokenizing the whole rendering at once produces
    }


def check_append(mine: Append, conversation: Conversation, *, limit_s: float = LIMIT_S) -> AppendCheck:
    """Run ``mine`` on every append of ``conversation`` and on the edge cases, print the verdict in
    one sentence, and hand on ``mine`` (or labkit's reference while it is the skeleton).

    ``limit_s``: how long one call may take before the check stops it and says so.
    """
    every = list(steps(conversation))
    probed: dict[int, Outcome] = {}

    def probe(f: Append) -> object:  # the first append, kept: a slow function is not waited for twice
        probed[id(f)] = outcome = call_append(f, every[0], limit_s)
        if isinstance(outcome.error, NotImplementedError):
            raise outcome.error
        return outcome.got

    used = mine_or_reference(mine, reference=reference_append, what="append_items", probe=probe)
    check = AppendCheck(None, used, "" if used is mine else "yours is still the skeleton")
    rollout_steps = len(conversation.batches)
    broken: list[str] = []
    encoded_total = added_total = 0
    extra: Step | None = None  # the append whose tokenizer work most exceeded its new ids
    extra_encoded, extra_excess = 0, (False, 0)
    for n, step in enumerate(every):
        outcome = probed.pop(id(used)) if n == 0 and id(used) in probed else call_append(used, step, limit_s)
        failure = failure_sentence(step, outcome, limit_s)
        if failure is not None:
            broken.append(failure)
            break
        added = len(step.expected) - len(step.cached)
        encoded_total, added_total = encoded_total + outcome.encoded, added_total + added
        # The append that most exceeded its new ids, a turn of the rollout rather than an edge case.
        excess = (n < rollout_steps, outcome.encoded - added)
        if outcome.encoded > added and (extra is None or excess > extra_excess):
            extra, extra_encoded, extra_excess = step, outcome.encoded, excess
        if n == rollout_steps - 1:
            check.last_turn = _last_turn(step, outcome.encoded)
    if check.reference:
        return check
    if broken:  # wrong ids, an error or no answer: the notebook goes on with labkit's reference
        last = every[rollout_steps - 1]
        check.used, check.stand_in = reference_append, "yours is not right yet"
        check.last_turn = _last_turn(last, call_append(reference_append, last, limit_s).encoded)
    if extra is not None:
        broken.append(too_much_work(extra, extra_encoded, ids_right=not broken))
    kept = [
        f"the same ids as a full re-render on all {rollout_steps} appends of the rollout and "
        f"{len(EDGE_CASES)} edge cases",
        f"an append: {encoded_total:,} tokens encoded for {added_total:,} new ids",
    ]
    check.verdict = Verdict("append_items", kept=[] if broken else kept, broken=broken)
    print(check.verdict.sentence + "".join(f"\n  - {rule}" for rule in broken[1:]))
    return check
