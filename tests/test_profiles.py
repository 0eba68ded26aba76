"""Latency profiles: the modeled delays, read from ``data/profiles/NAME.toml`` (or any TOML path).

The shipped profiles load with the values their comments explain, a broken file is refused
naming what it lacks, a profile written back as TOML reads the same, and the formulas the
stages spend their time by are checked by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.paths import default_data_dir
from labkit.profiles import Network, Safety, known_profiles, load_profile, profile_toml
from tests.helpers import profile_with

REPO_DATA = default_data_dir()
SHIPPED = ["article-fit", "local", "production-like", "room"]


@pytest.mark.parametrize("name", ["local", "production-like"])
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(name, REPO_DATA)
    assert profile.name == name
    assert profile.engine.replicas >= 1 and profile.engine.block_size == 16
    if name == "local":
        assert profile.network.handshake_s() == 0 and profile.network.one_way_s() == 0
        assert profile.safety.cost_s(10_000, fast=False) == 0
        assert profile.billing.hop_ms == profile.intermediary.hop_ms == 0
    else:
        assert profile.network.rtt_ms == 20 and profile.engine.replicas == 4
        assert profile.network.handshake_s() == pytest.approx(0.040)
        assert profile.safety.cost_s(1000, fast=True) < profile.safety.cost_s(1000, fast=False)


def test_profile_by_path(tmp_path: Path) -> None:
    path = profile_with(tmp_path, "custom", billing={"hop_ms": 42})
    profile = load_profile(str(path), tmp_path)
    assert (profile.name, profile.billing.hop_ms) == ("custom", 42)


def test_profile_missing_field_is_named(tmp_path: Path) -> None:
    text = (REPO_DATA / "profiles" / "local.toml").read_text().replace("fast_ms_per_1k_tokens = 0\n", "")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "broken.toml").write_text(text)
    with pytest.raises(ValueError, match=r"\[safety\] lacks fast_ms_per_1k_tokens"):
        load_profile("broken", tmp_path)


def test_profile_missing_section_is_named(tmp_path: Path) -> None:
    text = (REPO_DATA / "profiles" / "local.toml").read_text().replace("[intermediary]\nhop_ms = 0\n", "")
    path = tmp_path / "partial.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"lacks the \[intermediary\] section"):
        load_profile(str(path), tmp_path)


def test_unknown_profile_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown profile 'nowhere'") as err:
        load_profile("nowhere", tmp_path)
    assert "local" in str(err.value) and "production-like" in str(err.value)


def test_safety_cost_formula() -> None:
    safety = Safety(hop_ms=10, ms_per_1k_tokens=1.0, fast_hop_ms=4, fast_ms_per_1k_tokens=0.3)
    # Standard: 10 ms hop + 2.5k tokens * 1.0 ms/1k = 12.5 ms. Fast: 4 + 2.5 * 0.3 = 4.75 ms.
    assert safety.cost_s(2500, fast=False) == pytest.approx(0.0125)
    assert safety.cost_s(2500, fast=True) == pytest.approx(0.00475)
    assert safety.cost_s(0, fast=False) == pytest.approx(0.010)


def test_network_handshake_formula() -> None:
    # TCP (1 round trip) + TLS 1.2 (2 round trips) at 30 ms: 90 ms; half a round trip each way.
    network = Network(rtt_ms=30, tcp_handshake_round_trips=1, tls_handshake_round_trips=2)
    assert network.handshake_s() == pytest.approx(0.090)
    assert network.one_way_s() == pytest.approx(0.015)


def test_the_room_profile_seats_a_room_without_queueing() -> None:
    engine = load_profile("room", REPO_DATA).engine
    production = load_profile("production-like", REPO_DATA)
    assert engine.replicas * engine.max_concurrent >= 2 * 64  # twice the room: uneven hashing
    assert load_profile("room", REPO_DATA).network == production.network  # same per-turn costs


def test_known_profiles_are_the_shipped_ones_and_a_data_dirs_own(tmp_path: Path) -> None:
    assert known_profiles(tmp_path) == SHIPPED
    (tmp_path / "profiles").mkdir()
    profile_with(tmp_path / "profiles", "classroom", network={"rtt_ms": 35})
    assert known_profiles(tmp_path) == sorted([*SHIPPED, "classroom"])
    assert load_profile("classroom", tmp_path).network.rtt_ms == 35


@pytest.mark.parametrize("name", SHIPPED)
def test_a_profile_written_back_as_toml_reads_the_same(name: str, tmp_path: Path) -> None:
    profile = load_profile(name, REPO_DATA)
    path = tmp_path / f"{name}.toml"
    path.write_text(profile_toml(profile))
    assert load_profile(str(path), tmp_path) == profile
