"""The one runner: a phase of a response's stages, walked in the order of its design's plan.

Every stage a runner walks has one shape (``StageCall``): called with the response's run and
nothing else. What it needs beyond the run it holds itself (a profile entry, a store, a cache),
and what the request or the response said it reads off the run (the body to validate, the
status to bill).

Which stages of a phase run is the plan's answer for the run's segment (``Plan.stages_on``), given
here and nowhere else: a stage the design does without (the intermediary hop), one the waiting
response of an appended rollout already did (hydration, routing), storage for a request that did
not ask for it, billing that waits for the terminal event to be sent (overlapped). A stage never
asks the plan whether it runs; it may ask the plan how (``Step.over``, ``Step.overlapped``).

A phase is a stretch of the stages' order (``labkit.api.stages.Stage``), so a new stage joins the
phase it is listed in. The inference stages are not a runner's: the replica's slot (``queue``) is
held around prefill and decode, and a segment's downlink falls between them on a resumed segment
(``labkit.server.stages.responder.infer``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from labkit.api.stages import Stage
from labkit.server.stages.response_run import ResponseRun


class StageCall(Protocol):
    """A stage: run it for one response (refusing it with an ``APIError`` where it may)."""

    async def __call__(self, run: ResponseRun, /) -> None: ...


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
