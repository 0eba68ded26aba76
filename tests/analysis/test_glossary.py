"""The glossary defines every name a notebook shows, and the guide prints the same glossary."""

from __future__ import annotations

from pathlib import Path

from labkit import lab
from labkit.analysis import glossary
from labkit.api.stages import ClientStep, Stage


def test_the_glossary_defines_every_stage_the_plan_table_shows() -> None:
    terms = lab.glossary()
    assert set(lab.plan_table().index) <= set(terms.index)
    assert {str(s) for s in ClientStep if s is not ClientStep.OBSERVE} <= set(terms.index)
    for idea in ("prefill", "prefix cache", "KV cache", "TTFT", "end to end", "connection cache"):
        assert idea in terms.index
    assert terms["meaning"].str.len().min() > 20  # a sentence, not a placeholder
    assert terms.loc[str(Stage.DECODE), "kind"] == "stage: inference"


def test_the_guide_prints_the_same_glossary() -> None:
    guide = (Path(__file__).parents[2] / "notebooks" / "README.md").read_text(encoding="utf-8")
    assert glossary.markdown() in guide, "notebooks/README.md's glossary differs from lab.glossary()"
