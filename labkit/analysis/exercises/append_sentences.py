"""The sentences exercise 2's check says: what a wrong append got wrong, and what it usually means.

Each names where it happened (the turn of the rollout, or the edge case) and says in the learner's
terms what to change: the special tokens around each item, text that looks like markup, items
tokenized together, the cached ids changed, or the whole conversation tokenized again.
"""

from __future__ import annotations

import contextlib
import itertools

from labkit.analysis.exercises.append_calls import Outcome
from labkit.analysis.exercises.append_cases import Step
from labkit.api.items import Item
from labkit.engine.render import encode_items
from labkit.text.tokenizer import SPECIAL_TOKENS, encoding


def _kind(item: Item) -> str:
    kind = str(item.get("type", "message"))
    return f"{kind} ({item.get('role', 'user')})" if kind == "message" else kind


def _wrong_ids(step: Step, got: list[int]) -> str:
    """Where ``got`` leaves the full re-render, and what that usually means."""
    if not step.new:
        return f"{step.where} your ids are not the cached ones: with nothing new, return them unchanged"
    if got[: len(step.cached)] != step.cached:
        return (
            f"{step.where} your ids no longer start with the cached ones: keep the cached list as it "
            "is and add the new items' ids after it"
        )
    at = next((i for i, (a, b) in enumerate(zip(got, step.expected, strict=False)) if a != b), None)
    at = min(len(got), len(step.expected)) if at is None else at
    ends = list(itertools.accumulate(map(len, encode_items(step.new)), initial=len(step.cached)))[1:]
    index = next((n for n, end in enumerate(ends) if at < end), len(step.new) - 1)
    onward = f"from the {_kind(step.new[index])} onward"
    mine, wanted = got[len(step.cached) :], step.expected[len(step.cached) :]
    if _markers_as_text(mine) > _markers_as_text(wanted):
        why = (
            "the markers in your text stayed text (encode_text reads '<|im_start|>' as ordinary "
            "characters): add the special tokens' own ids, special(IM_START) and the others, between "
            "the pieces you tokenize"
        )
    elif _specials(mine) < _specials(wanted):
        why = (
            "each item needs its three special tokens: <|im_start|>, the header's ids, <|im_sep|>, "
            "the body's ids, <|im_end|>"
        )
    elif _specials(mine) > _specials(wanted):
        why = (
            "text that only looks like markup became special tokens: tokenize text with encode_text, "
            "which keeps it as text; only the template adds special tokens"
        )
    else:
        why = (
            "tokenize each item's header and body on their own, between the special tokens, or "
            "neighbouring text merges into other tokens"
        )
    return f"{step.where} your ids differ from a full re-render {onward}: {why}"


SPECIAL_IDS = frozenset(SPECIAL_TOKENS.values())


def _specials(ids: list[int]) -> int:
    return sum(t in SPECIAL_IDS for t in ids)


def _markers_as_text(ids: list[int]) -> int:
    """How many markup strings the ordinary (not special) ids spell."""
    enc, pieces = encoding(), []
    for t in ids:
        if t not in SPECIAL_IDS:
            with contextlib.suppress(KeyError):  # a number that is no token id spells nothing
                pieces.append(enc.decode_single_token_bytes(t))
    text = b"".join(pieces).decode("utf-8", errors="replace")
    return sum(text.count(marker) for marker in SPECIAL_TOKENS)


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def failure_sentence(step: Step, outcome: Outcome, limit_s: float) -> str | None:
    """The sentence for a call that failed or returned wrong ids; None when it was right."""
    if outcome.too_slow:
        return (
            f"{step.where} your append_items had not returned after {limit_s:g} s: an append "
            "does a little work per new item, so look for a loop that never ends"
        )
    if outcome.error is not None:
        error = outcome.error
        return f"{step.where} your append_items raised {type(error).__name__}: {str(error)[:120]}"
    if outcome.got is None:
        return f"{step.where} your append_items returned None: return the list of ids"
    if not _is_ids(outcome.got):
        return (
            f"{step.where} your append_items returned a {type(outcome.got).__name__}, not a list "
            "of token ids (ints)"
        )
    if outcome.got != step.expected:
        assert isinstance(outcome.got, list)
        return _wrong_ids(step, outcome.got)
    return None


def too_much_work(step: Step, encoded: int, ids_right: bool) -> str:
    """The sentence for an append that had the tokenizer do more than its new items need."""
    added = len(step.expected) - len(step.cached)
    said = f"{step.where} you had the tokenizer encode {encoded:,} tokens for {added:,} new ids"
    if encoded - added >= len(step.cached) // 2:  # most of what was cached, tokenized again
        why = "you re-tokenized the whole conversation, the work the cache exists to save"
    else:
        why = "an append encodes each new item's header and body once, and nothing else"
    return f"{'right ids, but ' if ids_right else ''}{said}: {why}"
