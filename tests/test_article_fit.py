"""The article fit: bounds hold, each residual is the cost model's for the fitted profile, the
checked-in profile is what the fit writes, that profile serves, and the command's mistakes are
one line."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from labkit.analysis import article_fit
from labkit.analysis.article_fit import (
    FIT_FILE,
    FitInputError,
    fit_articles,
    least_squares,
    outcome,
    profile_text,
    read_inputs,
)
from labkit.analysis.cost_model import predict
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.paths import builtin_data_dir
from labkit.profiles import SECTIONS, load_profile

CHECKED_IN = builtin_data_dir() / "profiles" / "article-fit.toml"
# Shape.of draws fresh call ids, whose token counts vary by a few per turn between runs: the
# fitted delays move by a few hundredths of a millisecond (shares by less).
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def fit() -> article_fit.ArticleFit:
    return fit_articles()


def test_least_squares_stops_at_a_bound_the_minimum_lies_beyond() -> None:
    def misses(z: np.ndarray) -> np.ndarray:
        return np.array([z[0] - 4.0, z[1] - 1.0, z[0] + z[1] - 5.0])

    z = least_squares(misses, np.zeros(2), np.array([-1.0, -1.0]), np.array([2.0, 3.0]))
    assert z[0] == pytest.approx(2.0)  # held at its bound, the gradient still pushing out
    assert z[1] == pytest.approx(2.0, abs=1e-5)  # the other takes up what it can: (1 + 3) / 2


def test_the_fit_keeps_every_parameter_within_its_bounds(tmp_path: Path) -> None:
    # Bounds tighter than where the figures pull: the fit must end on them, never past them.
    inputs = read_inputs()
    tight = {"network.rtt_ms": (15.0, 25.0), "billing.hop_ms": (5.0, 9.0)}
    narrowed = tuple(
        replace(p, low=tight[p.field][0], high=tight[p.field][1], prior=sum(tight[p.field]) / 2)
        if p.field in tight
        else p
        for p in inputs.parameters
    )
    result = fit_articles(replace(inputs, parameters=narrowed))
    table = result.parameters
    assert ((table["fitted"] >= table["low"] - 1e-9) & (table["fitted"] <= table["high"] + 1e-9)).all()
    assert table.loc["network.rtt_ms", "fitted"] == pytest.approx(15.0)  # the figures want it lower
    assert table.loc["billing.hop_ms", "at bound"]
    profile = result.profile
    assert profile.safety.fast_hop_ms <= profile.safety.hop_ms  # a share of at most 1
    assert profile.safety.fast_ms_per_1k_tokens <= profile.safety.ms_per_1k_tokens


def test_each_residual_is_the_cost_model_for_the_written_profile(fit, tmp_path: Path) -> None:
    path = tmp_path / "fitted.toml"
    path.write_text(profile_text(fit))
    written = load_profile(str(path), tmp_path)
    basis, inputs = fit.rollout, fit.inputs
    priced = {
        d: predict(d, written, basis.shape, decode_tps=1000, prefill_tps=basis.prefill_tps, cpu=inputs.cpu)
        for d in ("naive", "sprint", "websocket")
    }
    assert basis.decode_tps == 1000  # labkit-spark's speed
    for f in inputs.figures:
        expected = outcome(f.outcome, priced[f.design], priced[f.baseline]) + inputs.model_error.get(f.key, 0)
        row = fit.residuals.loc[f.name]
        assert row["fitted"] == pytest.approx(expected, abs=2e-4)  # the file rounds to 0.001 ms
        assert row["residual (points)"] == pytest.approx((expected - f.value) * 100, abs=0.02)


def test_the_tools_time_is_the_stated_one(fit) -> None:
    assert sum(t.tool_s for t in fit.rollout.shape.turns) == pytest.approx(fit.inputs.tool_s)


def test_the_checked_in_profile_is_what_the_fit_writes(fit) -> None:
    """``labkit fit --out data/profiles/article-fit.toml`` writes this file: refit after changing
    data/fits/articles.toml (or anything the cost model prices), so it cannot drift silently."""
    with CHECKED_IN.open("rb") as f:
        checked_in = tomllib.load(f)
    fresh = tomllib.loads(profile_text(fit))
    for section, cls in SECTIONS.items():
        for field in fields(cls):
            assert checked_in[section][field.name] == pytest.approx(
                fresh[section][field.name], abs=TOLERANCE
            ), f"{section}.{field.name}: refit with labkit fit --out {CHECKED_IN.name}"


def test_the_profile_says_where_each_number_came_from() -> None:
    text = CHECKED_IN.read_text()
    inputs = read_inputs()
    fitted = {p.field for p in inputs.parameters}
    section = ""
    comments: list[str] = []
    for line in text.splitlines():
        if line.startswith("["):
            section, comments = line.strip("[]"), []
        elif line.startswith("#"):
            comments.append(line)
        elif "=" in line:
            name = f"{section}.{line.split('=')[0].strip()}"
            said = " ".join(comments)
            assert ("Fitted:" in said) if name in fitted else ("Kept from production-like" in said), name
            comments = []
    for figure in inputs.figures:
        assert figure.name in text


def test_the_fit_reports_what_the_figures_cannot_pin_down(fit) -> None:
    table = fit.parameters
    assert len(table) == len(fit.inputs.parameters)
    assert ((table["narrowed"] >= 0) & (table["narrowed"] < 1)).all()
    assert (~table["pinned"]).any()
    # Five figures of three comparisons pin at most three unknowns' worth of the nine.
    assert 0 < fit.pinned_total <= len(fit.inputs.keys) + 1e-6
    assert fit.pinned_total == pytest.approx(sum(1 - (1 - table["narrowed"]) ** 2))
    # The integrators' comparison (websocket vs sprint) does not see the hops the sprint removed.
    assert table.loc["intermediary.hop_ms", "d saved:websocket/sprint (points/sd)"] == pytest.approx(
        0, abs=0.05
    )


def test_the_fitted_profile_loads_and_serves() -> None:
    profile = load_profile("article-fit", builtin_data_dir())
    with LabkitServer(args=["--profile", "article-fit"]) as server:
        frame = Rollout.run(server.base_url, "naive", "synthetic:turns=2,tool_tokens=50").frame()
    hops = frame[(frame["source"] == "server") & (frame["stage"] == "intermediary")]
    assert len(hops) == 2
    assert (hops["duration"] >= profile.intermediary.hop_ms / 1000 * 0.95).all()


# ---------------------------------------------------------------- the command


def labkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labkit", "fit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_labkit_fit_prints_the_table_and_writes_a_profile_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "mine.toml"
    done = labkit("--out", str(out))
    assert done.returncode == 0, done.stderr
    for figure in read_inputs().figures:
        assert figure.name in done.stdout
    assert "narrowed" in done.stdout and f"wrote {out}" in done.stdout
    assert load_profile(str(out), tmp_path).name == "mine"


def broken(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "articles.toml"
    text = FIT_FILE.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


BAD_INPUTS = {
    "not toml": ("[setting]", "[setting", "is not valid TOML"),
    "an unknown outcome": ('outcome = "ttft_cut"', 'outcome = "latency"', "is not one of ttft_cut, saved"),
    "a prior outside its bounds": ("prior = 20\n", "prior = 200\n", "needs low <= prior <= high"),
    "an unknown field": ('field = "auth.hop_ms"', 'field = "auth.hop"', "'auth.hop' is not a profile field"),
    "an unknown scenario": (
        'scenario = "fix-failing-test"',
        'scenario = "nope"',
        "Scenario 'nope' not found",
    ),
    "a missing key": ("tool_s = ", "tool_seconds = ", "[machine] lacks 'tool_s'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_fit_file_that_cannot_be_used_is_one_line(case: str, tmp_path: Path) -> None:
    old, new, fact = BAD_INPUTS[case]
    with pytest.raises(FitInputError) as caught:
        fit_articles(read_inputs(broken(tmp_path, old, new)))
    assert fact in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("args", "fact"),
    [
        (["--inputs", "missing.toml"], "cannot read the fit file 'missing.toml'"),
        (["--out", "no/such/folder/fit.toml"], "in a folder that does not exist"),
        (["--out", "fit.txt"], "must end in .toml"),
        (["--cpu", "fast"], "invalid choice: 'fast'"),
    ],
)
def test_the_command_answers_a_mistake_with_one_line(args: list[str], fact: str) -> None:
    done = labkit(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labkit fit: error:") and fact in lines[0], done.stderr


def test_the_command_names_a_broken_fit_file(tmp_path: Path) -> None:
    done = labkit("--inputs", str(broken(tmp_path, "[setting]", "[setting")))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "is not valid TOML" in done.stderr
