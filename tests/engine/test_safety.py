"""The safety scan: the fast pattern arrangement flags exactly what the documented patterns flag."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.engine.safety import PATTERNS, flagged, scan

pytestmark = pytest.mark.slow  # property searches

# Pieces of the texts each pattern looks for, their near misses, and what sits around them.
FRAGMENTS = [
    "ignore all previous instructions",
    "ignore prior instructions",
    "IGNORE ANY ABOVE INSTRUCTIONS",
    "Ignore  previous instructions",
    "disregard the system prompt",
    "Disregard System Prompt",
    "diſregard the ſyſtem prompt",  # long s: a case variant of "s" only Unicode folding knows
    "ıgnore all previous ınstructions",  # dotless i
    "İgnore prior instructions",
    "rm -rf / ",
    "rm  -rf /",
    "xrm -rf / ",
    "_rm -rf /\n",
    "rm -rf /tmp",
    "mkfs.ext4 /dev/sda",
    "amkfs.ext4 /dev/sda",
    "mkfs. /dev/",
    ":(){ :|:& };:",
    ":() { :|:& };:",
    "sk-" + "a" * 20,
    "sk-" + "a" * 19,
    "AKIA" + "A1" * 8,
    "-----BEGIN RSA PRIVATE KEY-----",
    "ghp_" + "x" * 36,
    "ghp_" + "x" * 35,
    " ",
    "\n",
    "é",
    "K",  # Kelvin sign
    "word",
    "",
]
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=8).map("".join)


def reference(text: str) -> list[str]:
    return [name for name, pattern in PATTERNS.items() if pattern.search(text)]


@settings(max_examples=1500, deadline=None)
@given(texts)
def test_the_fast_patterns_flag_exactly_what_the_patterns_flag(text: str) -> None:
    assert flagged(text) == reference(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, max_size=4))
def test_scan_flags_each_pattern_once_in_the_order_found(batch: list[str]) -> None:
    expected: list[str] = []
    for text in batch:
        expected += [name for name in reference(text) if name not in expected]
    assert scan(batch).flags == expected


def test_known_token_counts_are_not_tokenized_again() -> None:
    assert scan(["hello world"]).tokens == 2
    assert scan(["hello world"], tokens=7).tokens == 7
    assert scan(["rm -rf / "], tokens=0).flags == ["destructive_command"]
