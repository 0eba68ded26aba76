"""The safety classifier: real scanning code, plus the modeled cost of a GPU classifier service.

The scan is real work whose cost grows with the text it is given: the text is
tokenized (a classifier reads tokens) and matched against patterns for leaked
credentials and prompt-injection phrases. The service call it stands for is
modeled by the profile: a hop, plus a cost per 1k tokens scanned.

    >>> scan(["my key is sk-abcdefghijklmnopqrstuvwx"]).flags
    ['credential']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from labkit.engine.render import item_block
from labkit.engine.tokenizer import encode_text

PATTERNS = {
    "credential": re.compile(
        r"sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|ghp_[A-Za-z0-9]{36}"
    ),
    "prompt_injection": re.compile(
        r"ignore (?:all |any )?(?:previous|prior|above) instructions|disregard (?:the )?system prompt",
        re.IGNORECASE,
    ),
    "destructive_command": re.compile(
        r"\brm\s+-rf\s+/(?:\s|$)|\bmkfs\.\w+\s+/dev/|:\(\)\s*\{\s*:\|:&\s*\};:"
    ),
}


@dataclass
class ScanResult:
    tokens: int = 0
    characters: int = 0
    flags: list[str] = field(default_factory=list)


def classifier_texts(items: Iterable[dict[str, Any]]) -> list[str]:
    """What a classifier reads of each input item: its rendered header and body.

    >>> classifier_texts([{"type": "function_call_output", "call_id": "c1", "output": "ok"}])
    ['tool call_id=c1 ok']
    """
    return [" ".join(item_block(item)) for item in items]


def scan(texts: Iterable[str]) -> ScanResult:
    """Tokenize and pattern-match every text; flags name each pattern that matched (once)."""
    result = ScanResult()
    for text in texts:
        result.tokens += len(encode_text(text))
        result.characters += len(text)
        for name, pattern in PATTERNS.items():
            if name not in result.flags and pattern.search(text):
                result.flags.append(name)
    return result
