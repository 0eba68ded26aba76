"""A prediction laid out as a run: the cost model's turns as a measured rollout's frame, so the
measured metrics (``summary``, ``saving``, ``growth``, ``stage_work``) read a prediction and a
run with the same code.

Each turn starts with the client's ``send``; its stages follow one another in the plan's order
(the client building the request first, as the model counts it in TTFT), ``first_delta`` comes
at the model's TTFT, ``done`` when the last stage ends, and the tools run before the next
``send``. The render span carries the prompt the turn carried (``prompt_tokens``), as a
server's does.

    >>> from labkit.analysis.cost_model import predict
    >>> from labkit.analysis.cpu_costs import CpuCosts
    >>> from labkit.analysis.metrics import summary
    >>> from labkit.profiles import load_profile
    >>> from labkit.paths import default_data_dir
    >>> from labkit.analysis.shape import Shape
    >>> from labkit.scenarios import synthetic
    >>> shape = Shape.of(synthetic(turns=3))
    >>> p = predict("naive", load_profile("local", default_data_dir()), shape, decode_tps=1000,
    ...             prefill_tps=50_000, cpu=CpuCosts())
    >>> abs(summary(run_frame(p, shape))["e2e_s"] - p.end_to_end) < 1e-6
    True
"""

from __future__ import annotations

import pandas as pd

from labkit.analysis.cost_model import Prediction
from labkit.analysis.shape import Shape
from labkit.api.stages import ClientStep, Stage, bucket_of
from labkit.client.frame import COLUMNS


def run_frame(prediction: Prediction, shape: Shape) -> pd.DataFrame:
    """``prediction`` (of a rollout of ``shape``) as ``Rollout.frame()`` would hold it: one row per
    stage and client step, the client's instants, ``start`` in seconds from the first send."""
    if len(prediction) != len(shape.turns):
        raise ValueError(f"a prediction of {len(prediction)} turns is not of a {len(shape.turns)}-turn shape")
    rows: list[dict] = []
    clock, history = 0.0, shape.system_tokens
    for t, (cost, turn) in enumerate(zip(prediction, shape.turns, strict=True)):
        prompt = history + turn.new_tokens
        rows.append(_instant(t, ClientStep.SEND, clock))
        rows.append(_span(t, ClientStep.BUILD, "client", clock, cost.build, 0))
        at = clock + cost.build
        for stage, seconds in cost.stages.items():
            detail = {"prompt_tokens": prompt} if stage == Stage.RENDER else {}
            rows.append(_span(t, stage, "server", at, seconds, cost.tokens.get(stage, 0), detail))
            at += seconds
        rows.append(_instant(t, ClientStep.FIRST_DELTA, clock + cost.ttft))
        rows.append(_instant(t, ClientStep.DONE, at))
        rows.append(_span(t, ClientStep.TOOL, "client", at, cost.tools, 0))
        clock = at + cost.tools
        history = prompt + turn.output_block_tokens
    frame = pd.DataFrame(rows)
    frame["design"], frame["response_id"] = prediction.design, frame["turn"].map(lambda t: f"predicted_{t}")
    frame["t"] = frame["start"]  # the first send is at 0
    return frame[[*COLUMNS, "t"]]


def _span(
    turn: int, stage: str, source: str, start: float, seconds: float, tokens: int, detail: dict | None = None
) -> dict:
    return {
        "turn": turn,
        "stage": str(stage),
        "bucket": bucket_of(stage),
        "source": source,
        "start": start,
        "duration": seconds,
        "items": 0,
        "tokens": tokens,
        "detail": detail or {},
    }


def _instant(turn: int, step: ClientStep, at: float) -> dict:
    return _span(turn, step, "client", at, 0.0, 0)
