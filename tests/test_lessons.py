"""The learner's tools: the glossary covers every name a notebook shows, a guess is checked in one
sentence, and designs compare in tables with units (medians of repeated runs, with their spread)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from labkit import lab
from labkit.analysis import glossary, tables
from labkit.api.stages import ClientStep, Stage

SCENARIO = "synthetic:turns=4,output_tokens=20,tool_tokens=300,instruction_tokens=200"


def test_the_glossary_defines_every_stage_the_plan_table_shows() -> None:
    terms = lab.glossary()
    assert set(lab.plan_table().index) <= set(terms.index)
    assert {str(s) for s in ClientStep if s is not ClientStep.OBSERVE} <= set(terms.index)
    for idea in ("prefill", "prefix cache", "KV cache", "TTFT", "end to end", "connection cache"):
        assert idea in terms.index
    assert terms["meaning"].str.len().min() > 20  # a sentence, not a placeholder
    assert terms.loc[str(Stage.DECODE), "kind"] == "stage: inference"


def test_the_guide_prints_the_same_glossary() -> None:
    guide = (Path(__file__).parents[1] / "notebooks" / "README.md").read_text(encoding="utf-8")
    assert glossary.markdown() in guide, "notebooks/README.md's glossary differs from lab.glossary()"


@pytest.mark.parametrize(
    ("guess", "measured", "fmt", "ends"),
    [
        (0.30, 0.58, "{:.0%}", "28 points low."),
        (0.65, 0.58, "{:.0%}", "close."),
        (0.70, 0.58, "{:.0%}", "12 points high."),
        (0.90, 0.58, "{:.0%}", "32 points high."),
        (5.0, 1.25, "{:.2f} s", "4.0× too high."),
        (0.2, 1.0, "{:.1f} s", "5.0× too low."),
    ],
)
def test_a_numeric_guess_is_answered_with_its_distance(
    guess: float, measured: float, fmt: str, ends: str
) -> None:
    sentence = lab.check_guess(guess, measured, "the saving", fmt=fmt)
    assert sentence.startswith(f"You guessed {fmt.format(guess)} for the saving") and sentence.endswith(ends)


def test_a_word_guess_and_no_guess() -> None:
    assert lab.check_guess("Grows ", "grows", "the tokens").endswith(": right.")
    assert lab.check_guess("falls", "grows", "the tokens").endswith(": not this time.")
    assert lab.check_guess(None, 0.4, "the share").startswith("No guess recorded for the share")


def test_trend_reads_the_shape_of_a_series() -> None:
    assert lab.trend([300, 1200, 2100, 3000]) == "grows"
    assert lab.trend([310, 290, 305, 300, 298, 302]) == "stays flat"
    assert lab.trend([10, 6, 2]) == "falls"
    with pytest.raises(ValueError, match="two values"):
        lab.trend([1.0])


def test_compare_takes_medians_of_repeated_runs_and_states_their_spread(server: lab.LabkitServer) -> None:
    frames = lab.repeat(server.base_url, ["naive", "websocket"], SCENARIO, runs=3)
    assert [len(v) for v in frames.values()] == [3, 3]
    table = lab.compare(frames)
    assert list(table.index) == ["naive", "websocket"] and table.index.name == "design"
    e2e = [lab.summary(f)["e2e_s"] for f in frames["websocket"]]
    assert table.loc["websocket", tables.E2E] == pytest.approx(sorted(e2e)[1])
    assert table.loc["websocket", tables.SPREAD] == pytest.approx((max(e2e) - min(e2e)) / 2 / sorted(e2e)[1])
    assert table.loc["naive", "saved vs naive"] == 0
    assert table.loc["websocket", "saved vs naive"] == pytest.approx(
        1 - table.loc["websocket", tables.E2E] / table.loc["naive", tables.E2E]
    )
    assert table.loc["websocket", tables.RUNS] == 3

    single = lab.compare({d: runs[0] for d, runs in frames.items()}, baseline="websocket")
    assert tables.SPREAD not in single.columns and "saved vs websocket" in single.columns
    html = lab.styled(single).to_html()
    assert " s<" in html and " ms<" in html and "%<" in html  # every number in its unit


def test_compare_refuses_a_baseline_it_does_not_have() -> None:
    frame = pd.DataFrame()
    with pytest.raises(ValueError, match="'sprint' is not among"):
        lab.compare({"naive": frame}, baseline="sprint")


def test_styled_shows_counts_as_numbers_and_shares_in_percent() -> None:
    table = pd.DataFrame(
        {"input tokens": [15000.0, 450.0], "saved vs naive": [0.0, 0.45], "mean TTFT (ms)": [62.4, 51.0]},
        index=["naive", "websocket"],
    )
    html = lab.styled(table).to_html()
    assert "15,000<" in html and "45%<" in html and "62 ms<" in html and "1500000%" not in html
