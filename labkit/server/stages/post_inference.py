"""The stages after inference: what the API service does with the output the model sampled.

    output_safety the classifier over the new output
    retain        the conversation's KV and rendering kept for the next turn
    storage       the response and its items into SQLite (store=true)
    billing       one ledger row, blocking or overlapped with the next request

Each is a ``labkit.server.stages.runner.RunnerStage``: it names its stage, keeps the profile entry
and the resources it uses, and is called with the response's run alone. ``STAGES`` lists them for
``labkit.server.stages.pipeline.Pipeline`` to build, and the runner
(``labkit.server.stages.runner``) says which run. ``charge`` is the run's ledger row, for the
billing stage, for a compaction pass, and for a response that ended early
(``bill_if_abandoned``).
"""

from __future__ import annotations

from typing import Any

from labkit.api.stages import Stage
from labkit.engine import timing
from labkit.engine.prefix_cache import CacheWork
from labkit.engine.render import content_text
from labkit.engine.safety import scan
from labkit.server.stages.offload import off_loop_if_large
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.runner import Resources, RunnerStage
from labkit.server.stages.sampling import settle
from labkit.server.stores.billing import Billing, Charge


def output_text(item: dict[str, Any]) -> str:
    """What the output classifier reads of an output item: a message's text, a call's arguments;
    nothing of a compaction item (a summary of the window the input classifier already read)."""
    if item["type"] == "message":
        return content_text(item.get("content"))
    return str(item.get("arguments", ""))


class OutputSafety(RunnerStage):
    """Scan the output's text; its tokens are the ones the model sampled (not tokenized again)."""

    stage = Stage.OUTPUT_SAFETY

    def __init__(self, resources: Resources) -> None:
        self.safety = resources.profile.safety

    async def __call__(self, run: ResponseRun) -> None:
        items = run.response["output"]
        with run.trace.stage(Stage.OUTPUT_SAFETY) as span:
            texts = [output_text(i) for i in items]
            sampled = sum(map(len, run.output_ids))
            result = await off_loop_if_large(sum(map(len, texts)), span, scan, texts, tokens=sampled)
            span.items, span.tokens, span.detail["flags"] = len(items), result.tokens, result.flags
            await timing.sleep(self.safety.cost_s(result.tokens, fast=run.design.fast_classifiers))


class Retain(RunnerStage):
    """Settle the outputs and keep the whole conversation's KV (and rendering) for next time.

    Proportional to what this turn added: the prefix cache hashes the blocks after the
    buffer's known block hashes, and the render cache (``Renderings.keep``) keeps a view of the
    buffer (no copy), its running hash reading only the items it has not read yet.
    """

    stage = Stage.RETAIN

    def __init__(self, resources: Resources) -> None:
        self.renderings = resources.renderings

    async def __call__(self, run: ResponseRun) -> None:
        buffer = run.buffer
        assert buffer is not None and run.replica is not None
        with run.trace.stage(Stage.RETAIN) as span:
            copied = buffer.copied
            span.tokens = settle(run)
            work = CacheWork()
            buffer.add_block_hashes(run.replica.retain(buffer.ids, buffer.block_hashes, work))
            hashed = self.renderings.keep(run)
            span.detail.update(
                hashed_blocks=work.hashed_blocks,
                touched_blocks=work.touched_blocks,
                copied_ids=buffer.copied - copied,
                hashed_items=hashed,
            )


class Storage(RunnerStage):
    """The response and its items into the store (run where the request asked for it: ``store``)."""

    stage = Stage.STORAGE

    def __init__(self, resources: Resources) -> None:
        self.store = resources.store

    async def __call__(self, run: ResponseRun) -> None:
        req = run.req
        assert req is not None
        with run.trace.stage(Stage.STORAGE) as span:
            output = run.response["output"]
            # An appended rollout's tool results are inputs too (stored after the first input).
            inputs = run.new_items + [i for i in run.appended if i not in output]
            parent = req.previous_response_id
            if run.compacted is not None:
                # Compacted (context_management): the chain starts again from the compacted window.
                inputs, parent = run.compacted + [i for i in run.appended if i not in output], None
            elif parent and run.from_connection_cache and not await self.store.has(run.owner, parent):
                # The history came from an unstored response: store it whole, so it is not lost.
                inputs, parent = run.history + inputs, None
            await self.store.save(run.owner, run.response, inputs, output, parent=parent)
            span.items = len(inputs) + len(output)


def charge(run: ResponseRun, status: str) -> Charge:
    """The run's ledger row (marking it billed): its prompt, cached and sampled tokens."""
    run.billed = True
    return Charge(
        run.response["id"],
        run.owner,
        run.response["model"],
        run.prompt_tokens,
        run.cached_tokens,
        run.produced,
        status,
    )


class Bill(RunnerStage):
    """The billing stage, for the response's final status: blocking billing waits for the service;
    overlapped billing only queues the charge (the design's plan says which)."""

    stage = Stage.BILLING

    def __init__(self, resources: Resources) -> None:
        self.billing = resources.billing

    async def __call__(self, run: ResponseRun) -> None:
        overlapped = run.plan[Stage.BILLING].overlapped
        with run.trace.stage(Stage.BILLING, overlapped=overlapped):
            row = charge(run, run.response["status"])
            if overlapped:
                self.billing.charge_later(row)
            else:
                await self.billing.charge(row)


#: This module's stages, for the pipeline to build (in any order: the plan orders them).
STAGES: tuple[type[RunnerStage], ...] = (OutputSafety, Retain, Storage, Bill)


def bill_if_abandoned(run: ResponseRun, billing: Billing) -> None:
    """A response that ended early (an error, a disconnect) still pays for its prompt."""
    if not run.billed and run.prompt_tokens:
        billing.charge_later(charge(run, "cancelled"))
