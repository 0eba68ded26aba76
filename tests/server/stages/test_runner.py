"""The runner's stages: one shape, built by the pipeline from each module's list, in ``Stage`` order.

A new stage is its class (in its module's ``STAGES``), its name and definition, its price and its
test: the pipeline needs no line for it, and a walked stage without a class stops the server from
starting, not a response from running.
"""

from __future__ import annotations

import pytest

from labkit.api.stages import INFERENCE_STAGES, Stage
from labkit.engine.catalogue import load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.server.stages import post_inference, pre_inference
from labkit.server.stages.pipeline import RUNNER_STAGES, Pipeline
from labkit.server.stages.pre_inference import Intermediary, Validation
from labkit.server.stages.runner import (
    AFTER_INFERENCE,
    BEFORE_INFERENCE,
    RECORDING,
    WALKED,
    RunnerStage,
    build_stages,
)
from labkit.server.stores.billing import Ledger
from labkit.server.stores.database import Database
from labkit.server.stores.store import ResponseStore

DOOR = (Stage.CONNECT, Stage.UPGRADE, Stage.UPLINK, Stage.AUTH)


@pytest.fixture
def pipeline() -> Pipeline:
    database = Database(":memory:")
    return Pipeline(
        load_catalogue(None),
        load_profile("local", default_data_dir()),
        ResponseStore(database),
        Ledger(database),
    )


def test_the_runner_walks_every_stage_but_the_doors_the_downlink_and_inference() -> None:
    walked = set(Stage) - {*DOOR, Stage.DOWNLINK, *INFERENCE_STAGES}
    assert walked == WALKED
    assert not (BEFORE_INFERENCE & AFTER_INFERENCE or AFTER_INFERENCE & RECORDING)


def test_the_pipelines_stages_are_every_walked_stage_in_stage_order(pipeline: Pipeline) -> None:
    assert list(pipeline.stages) == [stage for stage in Stage if stage in WALKED]
    for stage, built in pipeline.stages.items():
        assert isinstance(built, RunnerStage) and built.stage is stage


def test_each_module_lists_its_own_stages() -> None:
    """Before inference in ``pre_inference``, after it in ``post_inference``: a stage lives with its phase."""
    assert {cls.stage for cls in pre_inference.STAGES} == BEFORE_INFERENCE
    assert {cls.stage for cls in post_inference.STAGES} == AFTER_INFERENCE | RECORDING


def test_a_walked_stage_without_a_class_is_an_error_when_the_pipeline_is_built(pipeline: Pipeline) -> None:
    without = [cls for cls in RUNNER_STAGES if cls is not Intermediary]
    with pytest.raises(ValueError, match="no stage class for: intermediary"):
        build_stages(without, pipeline)


def test_a_stage_has_one_class_and_is_a_walked_one(pipeline: Pipeline) -> None:
    with pytest.raises(ValueError, match="'validation' has a class already"):
        build_stages([*RUNNER_STAGES, Validation], pipeline)

    class KeyCheck(RunnerStage):
        stage = Stage.AUTH

    with pytest.raises(ValueError, match="'auth' is not a stage a runner walks"):
        build_stages([*RUNNER_STAGES, KeyCheck], pipeline)


def test_a_stage_is_built_from_the_pipelines_resources(pipeline: Pipeline) -> None:
    hydration, render = pipeline.stages[Stage.HYDRATION], pipeline.stages[Stage.RENDER]
    assert hydration.store is pipeline.store  # type: ignore[attr-defined]
    assert render.renderings is pipeline.renderings  # type: ignore[attr-defined]
    assert pipeline.stages[Stage.BILLING].billing is pipeline.billing  # type: ignore[attr-defined]
