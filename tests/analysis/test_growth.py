"""How a turn's time grows with its history: the line's slope and noise, and a word only when one
run can tell; on a real naive rollout the stages that read the history grow with it."""

from __future__ import annotations

import random

import pytest

from labkit import lab
from labkit.analysis.growth import Growth, history_tokens
from labkit.analysis.guesses import Undecided
from labkit.analysis.metrics import turns

pytestmark = pytest.mark.slow  # many rollouts


def test_a_clear_rise_is_named_and_its_size_is_stated() -> None:
    history = [1000 * i for i in range(1, 19)]
    ms = [100 + 2 * h / 1000 + (1 if i % 2 else -1) for i, h in enumerate(history)]
    g = Growth.fit(history, ms)
    assert g.per_1k_ms == pytest.approx(2.0, abs=0.1)
    assert g.over_rollout_ms == pytest.approx(34, abs=2)
    assert g.shape() == "grows"
    assert Growth.fit(history, [200 - v for v in ms]).shape() == "falls"


def test_noise_larger_than_the_rise_is_undecided_not_flat() -> None:
    rng = random.Random(7)
    history = [1000 * i for i in range(1, 19)]
    ms = [150 + 1.0 * h / 1000 + rng.gauss(0, 40) for h in history]
    shape = Growth.fit(history, ms).shape()
    assert isinstance(shape, Undecided) and "standard errors" in shape.reason


def test_a_steady_time_is_flat_only_when_surely_so() -> None:
    history = [1000 * i for i in range(1, 19)]
    assert Growth.fit(history, [150 + (0.5 if i % 2 else -0.5) for i in range(18)]).shape() == "stays flat"


def test_too_few_points_or_one_history_are_refused() -> None:
    with pytest.raises(ValueError, match="three turns"):
        Growth.fit([1, 2], [1, 2])
    with pytest.raises(ValueError, match="same history"):
        Growth.fit([5, 5, 5], [1, 2, 3])


def test_on_a_naive_rollout_the_history_stages_grow_and_a_socket_s_do_not(
    server: lab.LabkitServer,
) -> None:
    """The mechanism: naive validates, scans and renders the whole history every turn; the
    socket only the new items, so its reading stages do not build up with the history."""
    scenario = "synthetic:turns=10,output_tokens=20,tool_tokens=1500,instruction_tokens=200"
    naive = lab.Rollout.run(server.base_url, "naive", scenario).frame()
    socket = lab.Rollout.run(server.base_url, "websocket", scenario).frame()
    naive_work = lab.stage_work(naive, ["input_safety"])["input_safety"]
    socket_work = lab.stage_work(socket, ["input_safety"])["input_safety"]
    assert naive_work.iloc[-1] > 5 * socket_work.iloc[-1]
    reading = lab.growth(naive, stages=lab.HISTORY_STAGES)
    assert reading.history[1] > 10_000 and reading.per_1k_ms > 0


def test_designs_that_take_turns_play_turn_by_turn_and_leave_the_wait_out(server: lab.LabkitServer) -> None:
    """Every design plays turn t before any plays t + 1; the time a rollout waits while the others
    play is left out of its end to end, so each still reads as if it had run alone."""
    scenario = "synthetic:turns=4,output_tokens=20,tool_tokens=200,instruction_tokens=200"
    rounds = []
    for rollouts in lab.take_turns(server.base_url, ["naive", "websocket"], scenario):
        rounds.append({d: len(r.records) for d, r in rollouts.items()})
    assert rounds[:4] == [{"naive": n, "websocket": n} for n in range(1, 5)]
    naive, socket = (r.frame() for r in rollouts.values())
    records = rollouts["naive"].records
    waited = sum(r.observed[1] - r.observed[0] for r in records[:-1] if r.observed)  # within it
    wall = records[-1].done - records[0].sent
    assert waited > 0.3 * wall  # the other design's turns ran inside naive's rollout...
    assert lab.end_to_end(naive) < wall - 0.9 * waited  # ...and are not counted in its end to end
    assert lab.saving(naive, socket, column="wall").ms > 0


def test_several_rollouts_are_fitted_as_one_line_through_all_their_turns(server: lab.LabkitServer) -> None:
    """Two rollouts of one task: the line goes through both rollouts' turns (turn 0 of each left
    out), so its noise is the fit of all the points, not of either alone."""
    scenario = "synthetic:turns=6,output_tokens=20,tool_tokens=800,instruction_tokens=200"
    first = lab.Rollout.run(server.base_url, "naive", scenario).frame()
    second = lab.Rollout.run(server.base_url, "naive", scenario).frame()
    one, both = lab.growth(first), lab.growth([first, second])
    points = [
        (history[turn], api[turn] * 1000)
        for history, api in ((history_tokens(f), turns(f)["api"]) for f in (first, second))
        for turn in api.index
        if turn > 0
    ]
    expected = Growth.fit([h for h, _ in points], [ms for _, ms in points])
    assert both == expected and both != one
    # About the same histories, twice: the ids drawn at random (session, calls) tokenize to a few
    # more or fewer tokens from one rollout to the next (13 of 1,164 once).
    assert both.history == pytest.approx(one.history, rel=0.05)
