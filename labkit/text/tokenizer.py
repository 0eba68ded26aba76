"""The tokenizer: tiktoken's ``cl100k_base``, loaded offline from a file shipped in the package.

tiktoken normally downloads its ranks file on first use, which fails on a
machine with no network. labkit ships the file beside this module and checks
it against the SHA-256 that tiktoken itself publishes for ``cl100k_base``.

Three chat-markup tokens are added on top of the base encoding (the ids
``cl100k``-era chat models used), so message boundaries are single special
tokens and never merge with the text around them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import tiktoken

RANKS_FILE = Path(__file__).with_name("cl100k_base.tiktoken")
# The hash tiktoken pins for this file (tiktoken_ext/openai_public.py).
RANKS_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# cl100k_base's split pattern, as published with the encoding.
PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
IM_SEP = "<|im_sep|>"
SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    IM_START: 100264,
    IM_END: 100265,
    IM_SEP: 100266,
    "<|endofprompt|>": 100276,
}


class TokenizerFileError(RuntimeError):
    """The shipped ranks file is missing or is not the published ``cl100k_base``."""


def load_ranks(path: Path = RANKS_FILE, sha256: str = RANKS_SHA256) -> dict[bytes, int]:
    """Read a ``.tiktoken`` ranks file after checking its SHA-256.

    Each line is ``<base64 token bytes> <rank>``, e.g. ``IQ== 0`` is ``b"!" -> 0``.
    The hash is taken over the lines with ``\n`` endings: a checkout that rewrote them
    as ``\r\n`` (Git for Windows' default) holds the same ranks and loads.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise TokenizerFileError(
            f"tokenizer ranks file not found: {path}. Reinstall labkit; the file ships with it."
        ) from exc
    data = data.replace(b"\r\n", b"\n")  # base64 and digits never hold a CR: only endings change
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise TokenizerFileError(
            f"tokenizer ranks file {path} is corrupt: sha256 {digest}, expected {sha256}."
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The process-wide encoding (``cl100k_base`` plus the chat-markup tokens)."""
    return tiktoken.Encoding(
        name="cl100k_im",
        pat_str=PAT_STR,
        mergeable_ranks=load_ranks(),
        special_tokens=SPECIAL_TOKENS,
    )


def encode_text(text: str) -> list[int]:
    """Encode user-controlled text; special-token strings in it stay ordinary text."""
    return encoding().encode_ordinary(text)


def decode_text(ids: Sequence[int]) -> str:
    """The text of token ids (``encode_text``'s way back); named apart from the decode stage, which
    samples them (``labkit.server.stages.sampling.decode``)."""
    return encoding().decode(ids)  # type: ignore[arg-type]  # any sequence of ints will do


def special(token: str) -> int:
    """The id of a special token, e.g. ``special("<|im_start|>") -> 100264``."""
    return SPECIAL_TOKENS[token]
