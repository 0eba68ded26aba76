"""The glossary defines every name a notebook shows, and the guide prints the same glossary."""

from __future__ import annotations

from pathlib import Path

from labkit import lab
from labkit.analysis import glossary
from labkit.api.stages import ClientStep, Stage
from tests.helpers import load_script


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
    fix = "run python tools/sync_glossary.py"
    assert glossary.markdown() in guide, f"notebooks/README.md's glossary differs from lab.glossary(): {fix}"


def test_the_sync_tool_replaces_a_stale_table_with_the_glossary() -> None:
    sync = load_script("tools/sync_glossary.py")
    intro = "# Guide\n\n## Glossary\n\nEvery stage.\n\n"
    stale = intro + "| term | kind | meaning |\n|---|---|---|\n| `old` | stage | gone |\n"
    assert sync.synced(stale) == intro + glossary.markdown()
