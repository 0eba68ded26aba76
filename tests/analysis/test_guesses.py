"""A learner's guess, graded in the learner's terms: shares however written (and the reading
said), a tolerance that scales with the quantity and its noise, words by meaning, and a run that
cannot decide never marks a guess wrong."""

from __future__ import annotations

import numpy as np
import pytest

from labkit import lab
from labkit.analysis.guesses import CLOSE, SHARE_FLOOR, Undecided, check, decide, meaning

# ---------------------------------------------------------------- shares, however written


@pytest.mark.parametrize("written", [0.3, "0.3", 30, 30.0, "30%", "30 %", " 30% ", "30 percent", "0,3"])
def test_every_way_of_writing_thirty_percent_reads_as_thirty_percent(written: float | str) -> None:
    assert check(written, 0.58, "the share").startswith("You guessed 30% for the share")
    assert check(written, 0.58, "the share").endswith("28 points low.")


def test_the_sentence_says_how_an_ambiguous_number_was_read() -> None:
    assert "(read 30 as 30%)" in check(30, 0.58, "the share")
    assert "(read 1 as 100%)" in check(1, 0.58, "the share")
    assert "(read -5 as -5%)" in check(-5, -0.04, "the saving")
    for plain in (0.3, "30%", "0.3"):
        assert "read" not in check(plain, 0.58, "the share")  # nothing to choose: nothing said


@pytest.mark.parametrize("written", [300, "300", "lots", "grows", True, float("nan")])
def test_a_guess_that_is_no_share_gets_a_sentence_saying_how_to_write_one(written: object) -> None:
    sentence = check(written, 0.58, "the share")
    assert "write 0.3, 30 or '30%' for 30%" in sentence and sentence.endswith("This run measured 58%.")
    assert "close" not in sentence and "points" not in sentence


def test_numpy_numbers_and_a_missing_measurement() -> None:
    assert check(np.int64(30), np.float64(0.58), "the share").endswith("28 points low.")
    assert check(np.float32(0.3), 0.58, "the share").startswith("You guessed 30% for the share;")
    assert "gave no number for the share" in check(0.3, float("nan"), "the share")


def test_a_percent_outside_the_format_is_not_a_share() -> None:
    """``{:.0f}%`` shows a number already in percent: 30 is 30, not 0.3."""
    assert check(30, 58, "the share", fmt="{:.0f}%").startswith("You guessed 30% for the share;")


# ---------------------------------------------------------------- close, and how far


@pytest.mark.parametrize(
    ("guess", "measured", "verdict"),
    [
        (0.20, 0.10, "10 points high"),  # the case: double the measurement is not close
        (0.65, 0.58, "close (7 points high)"),  # within a quarter of 58%
        (0.13, 0.10, "close (3 points high)"),  # the 3-point floor, at its edge
        (0.14, 0.10, "4 points high"),  # ... and just past it
        (0.50, 0.40, "close (10 points high)"),  # a quarter of 40%, at its edge
        (0.51, 0.40, "11 points high"),  # ... and just past it
        (0.30, 0.58, "28 points low"),
        (0.58, 0.58, "right"),
        (0.584, 0.58, "right"),  # shown the same: no gap the learner could see
    ],
)
def test_close_is_a_quarter_of_the_measurement_with_a_floor_of_three_points(
    guess: float, measured: float, verdict: str
) -> None:
    assert check(guess, measured, "the saving").endswith(f": {verdict}.")
    assert (CLOSE, SHARE_FLOOR) == (0.25, 0.03)


def test_the_runs_noise_widens_close_and_is_shown() -> None:
    assert check(0.15, 0.10, "the saving").endswith(": 5 points high.")
    widened = check(0.15, 0.10, "the saving", spread=0.03)
    assert "10% (± 3 points of noise)" in widened and widened.endswith(": close (5 points high).")
    assert check(0.17, 0.10, "the saving", spread=0.03).endswith(": 7 points high.")  # past 3 + 3


def test_a_measurement_is_shown_to_the_precision_its_noise_allows() -> None:
    """A noise under a point is shown in tenths, the measurement with it; never '±0 points',
    never '-0%'."""
    quiet = check(0.2, 0.082, "the lead", spread=0.004)
    assert "this run measured 8.2% (± 0.4 points of noise)" in quiet and "±0" not in quiet
    assert "this run measured 0.3%" in check(None, 0.003, "the lead")
    assert "this run measured 0%" in check(None, -0.0004, "the lead")
    assert "-0" not in check(None, -0.0004, "the lead")
    assert check(0.026, 0.022, "the lead").endswith(": close (0.4 points high).")
    seconds = check(None, 1.23, "end to end", fmt="{:.1f} s", spread=0.04)
    assert seconds.endswith("this run measured 1.2 s (± <0.1 s of noise).")
    assert "-0.0" not in check(0.0, -0.01, "the change", fmt="{:.1f} s")


@pytest.mark.parametrize(
    ("guess", "measured", "fmt", "verdict"),
    [
        (1.5, 1.2, "{:.1f} s", "close (0.3 s high)"),  # a quarter of 1.2 s, at its edge
        (1.6, 1.2, "{:.1f} s", "1.3× too high"),
        ("1.3 s", 1.2, "{:.1f} s", "close (0.1 s high)"),
        (5.0, 1.25, "{:.2f} s", "4.0× too high"),
        (0.2, 1.0, "{:.1f} s", "5.0× too low"),
        (0.0, 1.2, "{:.1f} s", "too low"),
        ("1,000", 1200, "{:,.0f} tokens", "close (200 tokens low)"),
    ],
)
def test_other_numbers_are_graded_in_their_own_unit(
    guess: float | str, measured: float, fmt: str, verdict: str
) -> None:
    assert check(guess, measured, "end to end", fmt=fmt).endswith(f": {verdict}.")


def test_a_number_in_another_unit_is_refused_in_words() -> None:
    sentence = check("2 ms", 1.2, "end to end", fmt="{:.1f} s")
    assert "which is not a number: write one such as 1.5 (for 1.5 s)" in sentence


# ---------------------------------------------------------------- words, by meaning


@pytest.mark.parametrize(
    ("guess", "answer"),
    [
        ("flat", "stays flat"),
        ("Stays the same", "stays flat"),
        ("constant", "stays flat"),
        ("it stays flat.", "stays flat"),
        ("increases", "grows"),
        ("rises", "grows"),
        ("goes up!", "grows"),
        ("GROWS ", "grows"),
        ("bigger", "larger"),
        ("it will get bigger", "larger"),
        ("fewer", "less"),
        ("decreases", "shrinks"),
        ("shrinks", "shrinks"),
        ("yep", "yes"),
        ("Nope", "no"),
    ],
)
def test_a_word_means_what_it_says(guess: str, answer: str) -> None:
    assert check(guess, answer, "the tokens").endswith(": right.")


def test_the_sentence_says_how_a_word_was_read() -> None:
    assert "(read as 'stays flat')" in check("flat", "stays flat", "the tokens")
    assert "(read as 'larger')" in check("bigger", "larger", "the share")
    assert "read as" not in check("grows", "grows", "the tokens")
    assert "read as" not in check("shrinks", "grows", "the lead")  # an answer of its own vocabulary


@pytest.mark.parametrize(("guess", "answer"), [("falls", "grows"), ("flat", "grows"), ("more", "less")])
def test_a_word_of_another_meaning_is_wrong(guess: str, answer: str) -> None:
    assert check(guess, answer, "the tokens").endswith(": not this time.")


def test_a_word_labkit_does_not_read_is_answered_with_the_words_it_does() -> None:
    sentence = check("maybe", "grows", "the tokens")
    assert "not this time" not in sentence and "right" not in sentence
    assert "write 'grows', 'stays flat', 'falls' or 'shrinks' (or words meaning the same)" in sentence
    assert "write 'larger' or 'smaller'" in check("dunno", "smaller", "the share")
    assert "doesn't grow" not in sentence and meaning("doesn't grow") is None  # a negation is not read


def test_an_answer_of_its_own_is_compared_as_text() -> None:
    """A step's name or a label: case, spaces and punctuation ignored, nothing else."""
    assert check("no intermediary hop", "+ no intermediary hop", "the step").endswith(": right.")
    assert check("You", "you", "the row").endswith(": right.")
    assert check("render cache", "+ no intermediary hop", "the step").endswith(": not this time.")


def test_a_number_for_a_word_says_which_words() -> None:
    assert "which wants one of 'grows', 'stays flat', 'falls' or 'shrinks'" in check(
        0.3, "grows", "the tokens"
    )
    assert "which wants one of 'yes' or 'no'" in check(1, "no", "the question")


def test_no_guess_still_gives_the_answer() -> None:
    assert check(None, 0.4, "the share").startswith("No guess recorded for the share")
    assert check(None, "grows", "the tokens").endswith("this run's answer is 'grows'.")


# ---------------------------------------------------------------- a run that cannot decide


def test_decide_names_a_word_only_beyond_the_noise() -> None:
    assert decide(0.05, 0.04) == "larger"
    assert decide(-0.05, 0.04) == "smaller"
    assert decide(-0.05, 0.04, words=("grows", "shrinks")) == "shrinks"
    for within in (0.04, -0.04, 0.0, 0.01):  # at the noise's edge too: not beyond it
        assert isinstance(decide(within, 0.04), Undecided)


def test_an_undecided_run_says_why_with_both_numbers() -> None:
    run = decide(0.02, 0.04, what="the gap between the two savings")
    assert isinstance(run, Undecided) and run.answers == ("larger", "smaller")
    assert run.reason == "the gap between the two savings is 2 points, within the runs' noise of ±4 points"
    assert decide(-0.01, 0.04).reason == "the difference is 1 point, within the runs' noise of ±4 points"
    assert decide(0.2, 0.5, what="the lead", fmt="{:.1f} s").reason == (
        "the lead is 0.2 s, within the runs' noise of ±0.5 s"
    )


@pytest.mark.parametrize(("words", "noise"), [(("larger",), 0.1), (("a", "b", "c"), 0.1), (("a", "b"), -0.1)])
def test_decide_refuses_what_it_cannot_use(words: tuple[str, ...], noise: float) -> None:
    with pytest.raises(ValueError, match="decide needs"):
        decide(0.2, noise, words=words)
    with pytest.raises(ValueError, match="finite"):
        decide(float("nan"), 0.1)


@pytest.mark.parametrize(
    ("guess", "run"),
    [
        ("larger", decide(0.01, 0.04, what="the gap")),
        ("smaller", decide(0.01, 0.04, what="the gap")),
        ("bigger", decide(0.01, 0.04, what="the gap")),
        (0.3, Undecided("the gap is 1 point, within the runs' noise of ±4 points")),
        ("30%", Undecided("the gap is 1 point, within the runs' noise of ±4 points")),
    ],
)
def test_against_an_undecided_run_no_guess_is_confirmed_or_marked_wrong(
    guess: float | str, run: Undecided
) -> None:
    sentence = check(guess, run, "the share at 4,000 tokens/s")
    assert "this run could not decide (the gap is 1 point, within the runs' noise of ±4 points)" in sentence
    assert "neither confirmed nor marked wrong" in sentence
    assert not any(word in sentence for word in (": right", "not this time", "points high", "points low"))
    if not isinstance(guess, str) or "%" in guess:
        assert sentence.startswith("You guessed 30% for")


def test_an_undecided_run_still_says_which_words_it_reads() -> None:
    run = decide(0.01, 0.04)
    assert "(read as 'larger')" in check("bigger", run, "the share")
    for unread in (check("maybe", run, "the share"), check(0.3, run, "the share")):
        assert "write 'larger' or 'smaller'" in unread and "could not decide" in unread
    assert check(None, run, "the share").startswith("No guess recorded for the share")
    plain = check("larger", Undecided("the runs disagreed"), "the share")
    assert "could not decide (the runs disagreed)" in plain and "neither confirmed" in plain


def test_lab_exports_the_grading() -> None:
    assert {"check_guess", "decide", "Undecided", "trend"} <= set(lab.__all__)
    assert lab.check_guess is check and lab.decide is decide and lab.Undecided is Undecided
    for name in ("decide", "Undecided"):
        assert f"``{name}``" in (lab.__doc__ or "")
