"""The fit on a learner's laptop: the same fitted delays priced with another machine, that machine
measured from a run on the base profile, the fitted profile's run set beside the prediction, and
how much slower a laptop would have to be for an outcome to reach a figure."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from labkit import lab
from labkit.analysis.cost_model import predict
from labkit.analysis.fit import read_inputs
from labkit.analysis.fit.check import Landing, landings, side_by_side
from labkit.analysis.fit.inputs import FitInputs
from labkit.analysis.fit.laptop import crossover, measured_machine, scaled, with_cpu
from labkit.analysis.fit.outcomes import FITTED_NAME, Basis, model_outcomes
from labkit.analysis.whatif.as_run import run_frame
from labkit.client.launcher import LabkitServer
from labkit.profiles import Profile

pytestmark = pytest.mark.slow  # rollouts on two real servers

SOCKET = "saved:websocket/sprint"
CUT = "ttft_cut:sprint/naive"


@pytest.fixture(scope="module")
def inputs() -> FitInputs:
    return read_inputs()


@pytest.fixture(scope="module")
def fitted() -> Profile:
    return lab.profile(FITTED_NAME)


def outcomes(inputs: FitInputs, profile: Profile) -> dict[str, float]:
    return model_outcomes(inputs, Basis.of(inputs), profile)


def test_a_slower_laptop_saves_more_over_the_sprint_and_cuts_less_of_naives_ttft(inputs, fitted) -> None:
    # The socket removes CPU work (the history serialised, validated and scanned again); the sprint
    # removes hops, fixed milliseconds that are a smaller part of a slower laptop's TTFT.
    fast, here, slow = (outcomes(scaled(inputs, k), fitted) for k in (1 / 3, 1.0, 3.0))
    assert here == pytest.approx(outcomes(inputs, fitted))
    assert fast[SOCKET] < here[SOCKET] < slow[SOCKET]
    assert fast[CUT] > here[CUT] > slow[CUT]


def test_a_laptop_known_by_its_cpu_has_the_fit_files_machine_scaled_to_it(inputs, fitted) -> None:
    quarter = inputs.cpu.scaled(0.25)
    laptop = with_cpu(inputs, quarter)
    assert laptop.cpu == quarter
    assert laptop.tool_s == pytest.approx(inputs.tool_s / 4)
    for design, extra in inputs.unmodeled.items():
        assert laptop.unmodeled[design].turn_s == pytest.approx(extra.turn_s / 4)
        assert laptop.unmodeled[design].ttft_s == pytest.approx(extra.ttft_s / 4)
    assert outcomes(laptop, fitted) == pytest.approx(outcomes(scaled(inputs, 0.25), fitted))


def priced_run(inputs: FitInputs, profile: Profile) -> dict[str, pd.DataFrame]:
    """A rollout of each design as the cost model prices it with ``inputs``' CPU costs, laid out as
    a run's frames: what a laptop with exactly that CPU would measure (nothing beyond the model)."""
    basis = Basis.of(inputs)
    return {
        design: run_frame(
            predict(
                design,
                profile,
                basis.shape,
                decode_tps=basis.decode_tps,
                prefill_tps=basis.prefill_tps,
                cpu=inputs.cpu,
            ),
            basis.shape,
        )
        for design in inputs.designs
    }


def test_a_laptop_slower_than_its_cpu_costs_say_is_priced_from_the_base_profiles_run(inputs, fitted) -> None:
    # The laptop's CPU work really takes three times what its costs say (a busy laptop): the run on
    # production-like shows the difference as work beyond the model, and the prediction for the
    # fitted profile carries it over, landing on the fitted profile's run.
    stated = with_cpu(inputs, inputs.cpu.scaled(0.25))
    truth = replace(stated, cpu=stated.cpu.scaled(3), unmodeled={})  # all of its work priced
    base = Basis.of(stated).base
    base_run, fitted_run = priced_run(truth, base), priced_run(truth, fitted)
    here = measured_machine(stated, stated.cpu, base_run)
    assert here.cpu == stated.cpu
    assert all(here.unmodeled[d].turn_s > 0.005 for d in inputs.designs)  # the CPU work the costs missed
    assert here.unmodeled["naive"].turn_s > here.unmodeled["websocket"].turn_s  # naive has the most
    landed = landings(here, fitted, base_run, fitted_run)
    uncalibrated = outcomes(stated, fitted)
    for key, landing in landed.items():
        assert landing.measured == pytest.approx(outcomes(truth, fitted)[key])
        assert abs(landing.off) < 0.003 and landing.within, landing
        assert landing.noise < 0.003  # the same turns, priced alike: nothing left but rounding
    assert abs(landed[SOCKET].measured - uncalibrated[SOCKET]) > 0.04  # the CPU costs alone miss it


def test_a_fitted_run_that_is_not_the_fitted_profile_lands_outside_the_leeway(inputs, fitted) -> None:
    here = with_cpu(inputs, inputs.cpu.scaled(0.25))
    base_run = priced_run(here, Basis.of(here).base)
    slower_service = replace(fitted, billing=replace(fitted.billing, hop_ms=fitted.billing.hop_ms + 60))
    fitted_run = priced_run(here, slower_service)
    landed = landings(measured_machine(here, here.cpu, base_run), fitted, base_run, fitted_run)
    # billing holds up the sprint's turns, not the socket's (it overlaps the next request)
    assert not landed[SOCKET].within and landed[SOCKET].off > 0.05
    assert landed[CUT].within  # billing comes after the first token


def test_the_leeway_is_the_models_allowance_and_three_standard_errors() -> None:
    landing = Landing(SOCKET, measured=0.15, predicted=0.10, noise=0.01)
    assert landing.leeway == pytest.approx(0.05) and landing.within
    assert not Landing(SOCKET, measured=0.151, predicted=0.10, noise=0.01).within
    assert landing.same_side(0.30) is True and landing.same_side(0.12) is None
    assert Landing(SOCKET, measured=0.33, predicted=0.20, noise=0.01).same_side(0.30) is False


def test_crossover_is_the_slowdown_at_which_the_outcome_reaches_each_figure(inputs, fitted) -> None:
    laptop = with_cpu(inputs, inputs.cpu.scaled(0.25))
    reached = crossover(laptop, fitted, SOCKET, [0.30, 0.40, 0.95])
    assert reached[0] is not None and reached[1] is not None and reached[0] < reached[1]
    for target, factor in zip((0.30, 0.40), reached[:2], strict=True):
        assert outcomes(scaled(laptop, factor), fitted)[SOCKET] == pytest.approx(target, abs=1e-6)
    assert reached[2] is None  # no laptop within a hundred times makes the socket save 95%


def test_the_rollouts_on_two_servers_take_turns() -> None:
    designs, scenario = ["naive", "websocket"], "synthetic:turns=4,tool_tokens=200,instruction_tokens=1000"
    a, b = LabkitServer(args=["--profile", "local"]), LabkitServer(args=["--profile", "production-like"])
    with a, b:
        runs = side_by_side({"local": a.base_url, "production-like": b.base_url}, designs, scenario)
    assert set(runs) == {"local", "production-like"}
    sends = {}
    for name, frames in runs.items():
        assert set(frames) == set(designs)
        for design, frame in frames.items():
            assert sorted(frame["turn"].unique()) == [0, 1, 2, 3]
            sends[name, design] = frame[frame["stage"] == "send"].set_index("turn")["start"]
    for turn in range(3):  # every rollout played turn t before any played turn t + 1
        assert max(s[turn] for s in sends.values()) < min(s[turn + 1] for s in sends.values())
