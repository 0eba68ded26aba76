"""The pure parts of ``labkit compare``: model names per speed, the median rows, the tables, the JSON.

``median_rows`` is private but is the whole of the comparison's arithmetic; it is tested here by its
current name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.compare import Row, median_rows, models_for, rows_json
from labkit.cli.compare import format_tables
from labkit.engine.catalogue import MODELS_ENV, Catalogue, ModelSpec, load_catalogue

CATALOGUE = Catalogue(
    {
        "slow": ModelSpec("slow", decode_tps=65.0, prefill_tps=10_000.0),
        "fast": ModelSpec("fast", decode_tps=1000.0, prefill_tps=50_000.0),
        "burst": ModelSpec("burst", decode_tps=4000.0, prefill_tps=100_000.0),
    }
)


def run(e2e: float, ttft: float, api: float, turns: int = 5) -> dict[str, Any]:
    """One rollout's summary(), as compare() collects it."""
    return {"e2e_s": e2e, "ttft_mean_s": ttft, "api_share": api, "turns": turns}


# Two speeds, two designs; three repeats at 1000 tokens/s, two at 65.
RUNS: dict[tuple[float, str], list[dict[str, Any]]] = {
    (1000.0, "naive"): [run(10.0, 0.5, 0.4), run(12.0, 0.4, 0.5), run(11.0, 0.6, 0.3)],
    (1000.0, "websocket"): [run(6.0, 0.3, 0.1), run(8.8, 0.2, 0.2), run(7.0, 0.25, 0.15)],
    (65.0, "naive"): [run(40.0, 2.0, 0.05), run(44.0, 3.0, 0.07)],
    (65.0, "websocket"): [run(30.0, 1.0, 0.02), run(33.0, 1.5, 0.04)],
}
NAMES = {65.0: "labkit-classic", 1000.0: "labkit-spark"}
DESIGNS = ("naive", "websocket")


# ---------------------------------------------------------------- models_for


def test_models_for_exact_speeds_map_to_catalogue_models() -> None:
    names, toml = models_for([65.0, 1000.0, 4000.0], CATALOGUE)
    assert names == {65.0: "slow", 1000.0: "fast", 4000.0: "burst"}
    assert toml == ""


def test_models_for_other_speeds_get_added_models_with_the_nearest_prefill() -> None:
    names, toml = models_for([500.0, 1000.0, 3000.0, 2.5], CATALOGUE)
    assert names == {
        500.0: "labkit-tps-500",
        1000.0: "fast",
        3000.0: "labkit-tps-3000",
        2.5: "labkit-tps-2.5",
    }
    models = tomllib.loads(toml)["models"]
    assert set(models) == {"labkit-tps-500", "labkit-tps-3000", "labkit-tps-2.5"}
    # 500: |65 - 500| = 435 < |1000 - 500| = 500, so slow's prefill speed.
    assert models["labkit-tps-500"] == {"decode_tps": 500.0, "prefill_tps": 10_000.0}
    # 3000: |4000 - 3000| = 1000 < |1000 - 3000| = 2000, so burst's.
    assert models["labkit-tps-3000"] == {"decode_tps": 3000.0, "prefill_tps": 100_000.0}
    # 2.5: nearest is 65, slow's.
    assert models["labkit-tps-2.5"] == {"decode_tps": 2.5, "prefill_tps": 10_000.0}


def test_models_for_toml_loads_in_the_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODELS_ENV, raising=False)
    builtin = load_catalogue()
    names, toml = models_for([65.0, 500.0, 2000.0], builtin)
    assert names[65.0] == "labkit-classic"
    path = tmp_path / "models.toml"
    path.write_text(toml)
    merged = load_catalogue(path)
    # The built-in models are all still there, plus the two added ones.
    assert set(merged.names()) == set(builtin.names()) | {"labkit-tps-500", "labkit-tps-2000"}
    added = merged.resolve("labkit-tps-500")
    # 500 is nearest labkit-classic (65); 2000 is nearest labkit-spark (1000).
    assert (added.decode_tps, added.prefill_tps) == (500.0, builtin.resolve("labkit-classic").prefill_tps)
    added = merged.resolve("labkit-tps-2000")
    assert (added.decode_tps, added.prefill_tps) == (2000.0, builtin.resolve("labkit-spark").prefill_tps)
    # And the names models_for gave all resolve.
    assert all(merged.resolve(name) for name in names.values())


# ---------------------------------------------------------------- median_rows


def test_rows_medians_and_ratios_against_naive() -> None:
    rows = median_rows(RUNS, NAMES, DESIGNS)
    # One row per (speed, design), speeds in the order of names, designs in the given order.
    assert [(r.tps, r.design) for r in rows] == [
        (65.0, "naive"),
        (65.0, "websocket"),
        (1000.0, "naive"),
        (1000.0, "websocket"),
    ]
    by = {(r.tps, r.design): r for r in rows}

    naive = by[(1000.0, "naive")]
    assert naive.model == "labkit-spark"
    assert naive.e2e_s == pytest.approx(11.0)  # median(10, 12, 11)
    assert naive.ttft_mean_s == pytest.approx(0.5)  # median(0.5, 0.4, 0.6)
    assert naive.api_share == pytest.approx(0.4)  # median(0.4, 0.5, 0.3)
    assert naive.saved_vs_naive == pytest.approx(0.0)
    assert naive.ttft_cut_vs_naive == pytest.approx(0.0)
    assert (naive.turns, naive.runs) == (5, 3)

    ws = by[(1000.0, "websocket")]
    assert ws.e2e_s == pytest.approx(7.0)  # median(6, 8.8, 7)
    assert ws.ttft_mean_s == pytest.approx(0.25)  # median(0.3, 0.2, 0.25)
    assert ws.api_share == pytest.approx(0.15)  # median(0.1, 0.2, 0.15)
    assert ws.saved_vs_naive == pytest.approx(4 / 11)  # 1 - 7 / 11
    assert ws.ttft_cut_vs_naive == pytest.approx(0.5)  # 1 - 0.25 / 0.5
    assert (ws.turns, ws.runs) == (5, 3)

    # Two repeats: the median is the mean of the two.
    naive65 = by[(65.0, "naive")]
    assert naive65.model == "labkit-classic"
    assert naive65.e2e_s == pytest.approx(42.0)  # (40 + 44) / 2
    assert naive65.ttft_mean_s == pytest.approx(2.5)  # (2 + 3) / 2
    assert naive65.api_share == pytest.approx(0.06)  # (0.05 + 0.07) / 2
    assert naive65.runs == 2
    ws65 = by[(65.0, "websocket")]
    assert ws65.e2e_s == pytest.approx(31.5)  # (30 + 33) / 2
    assert ws65.ttft_mean_s == pytest.approx(1.25)  # (1 + 1.5) / 2
    assert ws65.api_share == pytest.approx(0.03)  # (0.02 + 0.04) / 2
    assert ws65.saved_vs_naive == pytest.approx(0.25)  # 1 - 31.5 / 42
    assert ws65.ttft_cut_vs_naive == pytest.approx(0.5)  # 1 - 1.25 / 2.5
    assert ws65.runs == 2
    assert isinstance(ws65.turns, int)


def test_rows_count_runs_per_design() -> None:
    runs = {
        (1000.0, "naive"): [run(10.0, 0.5, 0.4)],
        (1000.0, "websocket"): [run(6.0, 0.3, 0.1), run(8.0, 0.2, 0.2)],
    }
    rows = median_rows(runs, {1000.0: "labkit-spark"}, DESIGNS)
    assert [r.runs for r in rows] == [1, 2]
    # websocket: median(6, 8) = 7; 1 - 7 / 10 = 0.3
    assert rows[1].saved_vs_naive == pytest.approx(0.3)


def test_rows_without_naive_have_nan_ratios() -> None:
    runs = {
        (1000.0, "websocket"): [run(6.0, 0.3, 0.1)],
        (1000.0, "appended"): [run(5.0, 0.2, 0.05)],
        # naive ran, but is not among the designs compared.
        (1000.0, "naive"): [run(10.0, 0.5, 0.4)],
    }
    rows = median_rows(runs, {1000.0: "labkit-spark"}, ("websocket", "appended"))
    assert [r.design for r in rows] == ["websocket", "appended"]
    for r in rows:
        assert math.isnan(r.saved_vs_naive)
        assert math.isnan(r.ttft_cut_vs_naive)
    assert rows[1].e2e_s == pytest.approx(5.0)


# ---------------------------------------------------------------- format_tables


def test_format_tables() -> None:
    text = format_tables(median_rows(RUNS, NAMES, DESIGNS))
    header = "design      end to end   saved  mean TTFT    cut  API share"
    assert text.split("\n") == [
        "",
        "labkit-classic (65 tokens/s), median of 2 run(s); saved and cut: against naive",
        header,
        # 42.00 s, 0% saved, 2500 ms, 0% cut, 6% API share
        "naive          42.00 s      0%    2500 ms     0%         6%",
        # 31.50 s, 25% saved, 1250 ms, 50% cut, 3% API share
        "websocket      31.50 s     25%    1250 ms    50%         3%",
        "",
        "labkit-spark (1000 tokens/s), median of 3 run(s); saved and cut: against naive",
        header,
        # 11.00 s, 0% saved, 500 ms, 0% cut, 40% API share
        "naive          11.00 s      0%     500 ms     0%        40%",
        # 7.00 s, 4/11 = 36% saved, 250 ms, 50% cut, 15% API share
        "websocket       7.00 s     36%     250 ms    50%        15%",
    ]
    # The columns line up under the header.
    assert {len(line) for line in text.split("\n") if line and "tokens/s" not in line} == {len(header)}


# ---------------------------------------------------------------- rows_json


def test_rows_json_round_trips() -> None:
    rows = median_rows(RUNS, NAMES, DESIGNS)
    data = rows_json(rows)
    field_names = [f.name for f in dataclasses.fields(Row)]
    assert all(isinstance(d, dict) and list(d) == field_names for d in data)
    assert data[3]["design"] == "websocket"
    assert data[3]["saved_vs_naive"] == pytest.approx(4 / 11)
    # Through JSON text and back to Rows.
    again = [Row(**d) for d in json.loads(json.dumps(data))]
    assert again == rows


def test_rows_json_keeps_nan() -> None:
    only = {(65.0, "websocket"): [run(30.0, 1.0, 0.02)]}
    rows = median_rows(only, {65.0: "labkit-classic"}, ("websocket",))
    (data,) = rows_json(rows)
    assert math.isnan(data["saved_vs_naive"])
    assert math.isnan(json.loads(json.dumps(data))["ttft_cut_vs_naive"])


# ---------------------------------------------------------------- edge cases


def test_a_speed_named_twice_is_one_model() -> None:
    names, toml = models_for([500.0, 500.0], CATALOGUE)
    assert names == {500.0: "labkit-tps-500"}
    assert list(tomllib.loads(toml)["models"]) == ["labkit-tps-500"]


def test_large_speeds_get_distinct_plain_names() -> None:
    names, _ = models_for([1234567.0, 1234568.0], CATALOGUE)
    assert names == {1234567.0: "labkit-tps-1234567", 1234568.0: "labkit-tps-1234568"}


def test_the_header_says_when_designs_ran_different_numbers_of_times() -> None:
    runs = {**RUNS, (65.0, "naive"): [*RUNS[(65.0, "naive")], run(42.0, 2.5, 0.06)]}
    text = format_tables(median_rows(runs, NAMES, DESIGNS))
    assert "median of 2 to 3 run(s)" in text


# ---------------------------------------------------------------- the designs take turns, turn by turn


def test_designs_take_turns_turn_by_turn_on_a_real_server() -> None:
    """``labkit compare`` plays the designs as the notebooks do: every design sends turn *t*
    before any sends turn *t* + 1, so a machine that changes meanwhile touches them alike."""
    from labkit.analysis.compare import alternated, run_designs
    from labkit.client.launcher import LabkitServer
    from labkit.scenarios import synthetic

    scenario = synthetic(turns=3, output_tokens=8, tool_tokens=16, instruction_tokens=32)
    with LabkitServer(args=["--profile", "local"]) as server:
        played = alternated(server.base_url, ["naive", "websocket", "appended"], scenario)
    sends = {
        design: rollout.frame().query("stage == 'send'").groupby("turn")["start"].min()
        for design, rollout in played.items()
    }
    assert all(len(starts) == 3 for starts in sends.values())
    for turn in sorted(sends["naive"].index)[:-1]:
        last_of_this = max(starts[turn] for starts in sends.values())
        assert last_of_this < min(starts[turn + 1] for starts in sends.values())

    rows = run_designs(tps=[1000.0], scenario=scenario, profile="local", designs=["naive", "websocket"])
    assert [(r.design, r.turns, r.runs) for r in rows] == [("naive", 3, 1), ("websocket", 3, 1)]
    naive, websocket = rows
    assert naive.saved_vs_naive == 0
    assert websocket.saved_vs_naive == pytest.approx(1 - websocket.e2e_s / naive.e2e_s)
