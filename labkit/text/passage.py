"""The passage labkit's simulated text is cut from: its first sentences, and text of exactly
``count`` tokens (a policy's long answer, a synthetic scenario's instructions and tool output,
a recorded session's hidden reasoning).
"""

from __future__ import annotations

import re
from functools import lru_cache

PASSAGE = (
    "An agent loop alternates between the model and the client. The model picks an "
    "action, the client runs a tool, and the result goes back for the next turn. Each "
    "turn pays for three things: the API service around the model, inference on the "
    "accelerator, and the client's own tools. When decoding was slow, inference hid "
    "the service's cost; once decoding reached a thousand tokens a second, the "
    "service became the part worth optimizing. Keeping one connection open and "
    "caching the previous response's state lets the service process only what is "
    "new in each turn. "
)


def leading_sentences(max_chars: int) -> str:
    """The passage's first sentences, as many as fit in ``max_chars`` (always at least one).

    Whole sentences only, so a fixed answer never stops mid-word.

    >>> leading_sentences(80)
    'An agent loop alternates between the model and the client.'
    >>> leading_sentences(0) == leading_sentences(80)
    True
    """
    sentences = re.split(r"(?<=\.)\s+", PASSAGE.strip())
    text = sentences[0]
    for sentence in sentences[1:]:
        longer = f"{text} {sentence}"
        if len(longer) > max_chars:
            break
        text = longer
    return text


def text_of_tokens(count: int) -> str:
    """Text that tokenizes to exactly ``count`` tokens and ends a sentence.

    The passage is cut into the tokenizer's own pre-token pieces and only
    one-token pieces are kept, so any number of them re-tokenizes to that number.
    The last piece is always ".", and for ``count >= 2`` the piece before it
    is a word, so the text ends at a word and a sentence boundary. ``count == 1``
    gives just "."; ``count <= 0`` gives "".

    >>> from labkit.text.tokenizer import encode_text
    >>> [len(encode_text(text_of_tokens(n))) for n in (1, 7, 300)]
    [1, 7, 300]
    >>> text_of_tokens(7)
    'An agent loop between the model.'
    """
    if count <= 0:
        return ""
    pieces = _one_token_pieces()
    # Cycle through the passage for count - 2 pieces, then the next word piece,
    # then ".". Skipping punctuation to reach that word keeps two punctuation
    # pieces from meeting at the end, where they would merge into other tokens.
    # Whole cycles are one string repeated (a long answer costs no loop per token).
    cycles, rest = divmod(max(0, count - 2), len(pieces))
    body = [_passage_cycle() * cycles, *pieces[:rest]]
    if count >= 2:
        i = count - 2
        while not _is_word(pieces[i % len(pieces)]):
            i += 1
        body.append(pieces[i % len(pieces)])
    body.append(".")
    return "".join(body).lstrip()  # the first piece's leading space (pieces are never blank)


def _is_word(piece: str) -> bool:
    """A piece of letters, with at most a leading space: ``" model"`` yes, ``"'s"`` no."""
    return piece.lstrip(" ").isalpha()


@lru_cache(maxsize=1)
def _passage_cycle() -> str:
    return "".join(_one_token_pieces())


@lru_cache(maxsize=1)
def _one_token_pieces() -> tuple[str, ...]:
    import regex

    from labkit.text.tokenizer import PAT_STR, encode_text

    pieces = regex.findall(PAT_STR, " " + PASSAGE.strip())
    return tuple(p for p in pieces if len(encode_text(p)) == 1 and p.strip())
