"""The one runner: a phase of a response's stages, walked in the order of its design's plan.

Every stage a runner walks has one shape (``RunnerStage``): a class that names its ``Stage``, is
built from the pipeline's resources (``Resources``), and is called with the response's run and
nothing else. What it needs beyond the run it holds itself (a profile entry, a store, a cache),
and what the request or the response said it reads off the run (the body to validate, the
status to bill). Each stage module lists its stages (``STAGES``); the pipeline builds them all
(``build_stages``), so a new stage is its class, its name and definition (``labkit.api.stages``),
its price (``labkit.analysis.stage_prices``) and its test.

Which stages of a phase run is the plan's answer for the run's segment (``Plan.stages_on``), given
here and nowhere else: a stage the design does without (the intermediary hop), one the waiting
response of an appended rollout already did (hydration, routing), storage for a request that did
not ask for it, billing that waits for the terminal event to be sent (overlapped). A stage never
asks the plan whether it runs; it may ask the plan how (``Step.over``, ``Step.overlapped``). A
stage the design's plan does not name takes its phase's default step (``labkit.designs.Plan``).

A phase is a stretch of the stages' order (``labkit.api.stages.Stage``), so a new stage joins the
phase it is listed in. The door's stages and inference's are not a runner's: the door comes
before a response's run exists (``labkit.server.stages.door``), and the replica's slot must be
held around prefill and decode and freed whatever ends them, so the queue is a context manager
around them, with a resumed segment's downlink between them (``labkit.server.stages.responder.infer``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import ClassVar, Protocol

from labkit.api.stages import Stage
from labkit.profiles import Profile
from labkit.server.stages.render_cache import Renderings
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.routing import Router
from labkit.server.stores.billing import Billing
from labkit.server.stores.store import ResponseStore


class StageCall(Protocol):
    """A stage: run it for one response (refusing it with an ``APIError`` where it may)."""

    async def __call__(self, run: ResponseRun, /) -> None: ...


class Resources(Protocol):
    """What a stage is built with: the latency profile and the resources the pipeline shares
    (``labkit.server.stages.pipeline.Pipeline`` holds them)."""

    profile: Profile
    store: ResponseStore
    renderings: Renderings
    router: Router
    billing: Billing


class RunnerStage:
    """A stage a runner walks: it names its ``stage``, takes what it needs from the pipeline's
    ``Resources`` when the pipeline builds it, and is called with the response's run alone.

        class Intermediary(RunnerStage):
            stage = Stage.INTERMEDIARY

            def __init__(self, resources: Resources) -> None:
                self.intermediary = resources.profile.intermediary

            async def __call__(self, run: ResponseRun) -> None: ...
    """

    stage: ClassVar[Stage]

    def __init__(self, resources: Resources) -> None:
        """A stage that needs nothing but the run keeps nothing of the resources."""

    async def __call__(self, run: ResponseRun, /) -> None:
        raise NotImplementedError(f"{type(self).__name__} runs its stage here")


def _from(first: Stage, stop: Stage | None = None) -> frozenset[Stage]:
    """The stages from ``first`` up to ``stop`` (not included), in ``Stage`` order."""
    order = list(Stage)
    return frozenset(order[order.index(first) : order.index(stop) if stop else None])


#: What a client sent, checked, and everything done with it before the model sees it.
BEFORE_INFERENCE = _from(Stage.VALIDATION, Stage.DOWNLINK)
#: After inference, before the terminal event is made: what the output needs.
AFTER_INFERENCE = _from(Stage.OUTPUT_SAFETY, Stage.STORAGE)
#: The finished response recorded: before its terminal event is sent, or beside the next request
#: where the plan overlaps the stage (``run_stages(..., overlapped=True)``, once it is sent).
RECORDING = _from(Stage.STORAGE)
#: Every stage a runner walks.
WALKED = BEFORE_INFERENCE | AFTER_INFERENCE | RECORDING


def build_stages(classes: Iterable[type[RunnerStage]], resources: Resources) -> dict[Stage, StageCall]:
    """Every stage a runner walks, built from ``resources``, in ``Stage`` order. A walked stage
    with no class (or with two) is an error here, when the server starts, not at a response."""
    built: dict[Stage, StageCall] = {}
    for cls in classes:
        if cls.stage not in WALKED:
            raise ValueError(f"{cls.__name__}: '{cls.stage}' is not a stage a runner walks")
        if cls.stage in built:
            raise ValueError(f"{cls.__name__}: '{cls.stage}' has a class already")
        built[cls.stage] = cls(resources)
    missing = [str(stage) for stage in Stage if stage in WALKED and stage not in built]
    if missing:
        raise ValueError(f"no stage class for: {', '.join(missing)} (add it to its module's STAGES)")
    return {stage: built[stage] for stage in Stage if stage in built}


async def run_stages(
    stages: Mapping[Stage, StageCall],
    run: ResponseRun,
    phase: Collection[Stage],
    *,
    last: bool = False,
    overlapped: bool = False,
) -> None:
    """Run the stages of ``phase`` (``stages``: the pipeline's, ``Pipeline.stages``) that the run's
    plan names for its segment, in the plan's order. ``last``: the response's last segment (the
    stages after inference wait for it in an appended rollout); ``overlapped``: the stages the
    plan overlaps with the next request, or the others."""
    plan = run.plan
    store = run.req is not None and run.req.store  # storage, the one stage it decides, follows validation
    for stage in plan.stages_on(run.trace.segment, last, store=store):
        if stage in phase and plan[stage].overlapped is overlapped:
            await stages[stage](run)
