"""The model catalogue: the built-in models and their speeds, a TOML file (or ``$LABKIT_MODELS``)
merged over them, the names a lookup knows, and the speeds ``labkit compare`` and ``labkit replay``
run by default.

In process, on the real ``models.toml`` and override files written to a temporary directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.engine.catalogue import (
    MODELS_ENV,
    REPLAY_MODELS,
    Catalogue,
    ModelSpec,
    UnknownModel,
    builtin_speeds,
    load_catalogue,
)

# ---------------------------------------------------------------- the built-in models


def test_the_builtin_models_and_their_decode_speeds(no_env_models: None) -> None:
    catalogue = load_catalogue()
    assert catalogue.names() == ["labkit-burst", "labkit-classic", "labkit-spark"]
    speeds = {name: catalogue.resolve(name).decode_tps for name in catalogue.names()}
    assert speeds == {"labkit-classic": 65.0, "labkit-spark": 1000.0, "labkit-burst": 4000.0}
    for name in catalogue.names():
        spec = catalogue.resolve(name)
        assert spec.name == name
        assert spec.prefill_tps > spec.decode_tps
        assert spec.description


def test_prefill_time_is_uncached_tokens_over_prefill_speed(no_env_models: None) -> None:
    spark = load_catalogue().resolve("labkit-spark")
    assert spark.prefill_seconds(50_000) == pytest.approx(1.0)
    assert spark.prefill_seconds(0) == 0


def test_builtin_speeds_are_the_builtin_models_slowest_first(no_env_models: None) -> None:
    catalogue = load_catalogue()
    speeds = builtin_speeds()
    assert speeds == tuple(sorted(round(catalogue.resolve(n).decode_tps) for n in catalogue.names()))
    assert all(type(speed) is int for speed in speeds)


def test_builtin_speeds_of_named_models_only(no_env_models: None) -> None:
    catalogue = load_catalogue()
    assert builtin_speeds(("labkit-spark", "labkit-classic")) == (
        65,
        1000,
    )  # slowest first, whatever the order
    assert builtin_speeds(("labkit-burst",)) == (4000,)
    replay = builtin_speeds(REPLAY_MODELS)
    assert replay == tuple(sorted(round(catalogue.resolve(n).decode_tps) for n in REPLAY_MODELS))
    assert set(replay) < set(builtin_speeds())  # the production peak left out


def test_builtin_speeds_ignore_the_override_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What ``labkit compare`` and ``labkit replay`` run by default is labkit's own models,
    # whatever the shell sets.
    extra = tmp_path / "models.toml"
    extra.write_text(
        "[models.labkit-spark]\ndecode_tps = 2000\n\n[models.mine]\ndecode_tps = 300\nprefill_tps = 1e4\n"
    )
    monkeypatch.setenv(MODELS_ENV, str(extra))
    assert load_catalogue().resolve("labkit-spark").decode_tps == 2000.0  # the override is in force
    assert builtin_speeds() == (65, 1000, 4000)
    assert builtin_speeds(("labkit-spark",)) == (1000,)


# ---------------------------------------------------------------- a file merged over them


def test_an_override_file_changes_one_field_and_adds_a_model(no_env_models: None, tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text(
        "[models.labkit-spark]\ndecode_tps = 2000\n\n"
        '[models.my-model]\ndecode_tps = 300\nprefill_tps = 20000\ndescription = "mine"\n'
    )
    builtin = load_catalogue()
    catalogue = load_catalogue(extra)
    spark = catalogue.resolve("labkit-spark")
    assert spark.decode_tps == 2000.0
    assert spark.prefill_tps == builtin.resolve("labkit-spark").prefill_tps  # the rest is kept
    assert spark.description == builtin.resolve("labkit-spark").description
    assert catalogue.resolve("my-model") == ModelSpec("my-model", 300.0, 20000.0, "mine")
    assert catalogue.resolve("labkit-classic") == builtin.resolve("labkit-classic")
    assert set(catalogue.names()) == {*builtin.names(), "my-model"}


def test_the_override_file_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text("[models.labkit-classic]\ndecode_tps = 50\n")
    monkeypatch.setenv(MODELS_ENV, str(extra))
    assert load_catalogue().resolve("labkit-classic").decode_tps == 50.0


def test_a_file_passed_in_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_env, passed = tmp_path / "env.toml", tmp_path / "passed.toml"
    from_env.write_text(
        "[models.labkit-classic]\ndecode_tps = 50\n\n[models.env-only]\ndecode_tps = 1\nprefill_tps = 1\n"
    )
    passed.write_text("[models.labkit-classic]\ndecode_tps = 70\n")
    monkeypatch.setenv(MODELS_ENV, str(from_env))
    catalogue = load_catalogue(passed)
    assert catalogue.resolve("labkit-classic").decode_tps == 70.0
    assert "env-only" not in catalogue.names()  # one file is merged, not both


def test_a_file_without_models_changes_nothing(no_env_models: None, tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text("# no models yet\n")
    assert load_catalogue(extra).models == load_catalogue().models


def test_a_new_models_speeds_are_floats_and_its_description_may_be_left_out(
    no_env_models: None, tmp_path: Path
) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text("[models.plain]\ndecode_tps = 300\nprefill_tps = 20000\n")
    plain = load_catalogue(extra).resolve("plain")
    assert plain.description == ""
    assert (type(plain.decode_tps), type(plain.prefill_tps)) == (float, float)
    assert plain.prefill_seconds(3) == pytest.approx(3 / 20_000)


def test_a_model_missing_prefill_tps_is_an_error(no_env_models: None, tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text("[models.half-done]\ndecode_tps = 300\n")
    with pytest.raises(ValueError, match="half-done"):
        load_catalogue(extra)


def test_a_model_missing_decode_tps_is_an_error(no_env_models: None, tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text("[models.half-done]\nprefill_tps = 20000\n")
    with pytest.raises(ValueError, match="'half-done' needs decode_tps and prefill_tps"):
        load_catalogue(extra)


# ---------------------------------------------------------------- looking a model up


def test_an_unknown_model_is_named_with_the_known_ones(no_env_models: None) -> None:
    catalogue = load_catalogue()
    with pytest.raises(UnknownModel) as info:
        catalogue.resolve("gpt-99")
    assert info.value.name == "gpt-99"
    assert "gpt-99" in str(info.value)
    assert "labkit-spark" in str(info.value)
    assert isinstance(info.value, LookupError)


def test_names_and_the_unknown_models_message_list_every_model_sorted() -> None:
    catalogue = Catalogue({name: ModelSpec(name, 1.0, 2.0) for name in ("zeta", "alpha", "mid")})
    assert catalogue.names() == ["alpha", "mid", "zeta"]
    with pytest.raises(UnknownModel) as info:
        catalogue.resolve("nope")
    assert str(info.value) == "The model 'nope' does not exist. Available models: alpha, mid, zeta."
