"""The words the notebooks use, defined once: every stage and client step (from
``labkit.api.stages.DEFINITIONS``) and the ideas around them.

``glossary()`` is what a notebook shows; ``markdown()`` is the same table for the instructor
guide, which a test keeps identical to it.

    >>> table = glossary()
    >>> table.loc["prefill", "kind"], table.loc["TTFT", "kind"]
    ('stage: inference', 'measure')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from labkit.api.stages import CLIENT_INSTANTS, DEFINITIONS, ClientStep, Stage, bucket_of

if TYPE_CHECKING:
    from pandas.io.formats.style import Styler

# Ideas that are not stages, in the order a learner meets them.
IDEAS: dict[str, tuple[str, str]] = {
    "agent loop": (
        "idea",
        "The model picks an action, the client runs a tool, the result goes back: repeat.",
    ),
    "turn": (
        "idea",
        "One request and its response in an agent loop, with the tool run that follows it.",
    ),
    "rollout": (
        "idea",
        "A whole agent loop on one task, from the user's message to the final answer.",
    ),
    "design": (
        "idea",
        "One way of serving a rollout: naive, sprint, websocket, appended, or a composition.",
    ),
    "token": (
        "idea",
        "The unit a model reads and writes: about three quarters of an English word.",
    ),
    "tokens/s": (
        "idea",
        "A model's decode speed: 65 for the older models, 1,000 and more for the fast one.",
    ),
    "prefix cache": (
        "idea",
        "The GPU's memory of prompts it has already read, so a longer prompt with the same start is"
        " prefilled only from where it differs.",
    ),
    "KV cache": (
        "idea",
        "What the prefix cache holds: the attention keys and values computed for each prompt token.",
    ),
    "connection cache": (
        "idea",
        "WebSocket mode's memory, on one connection: the previous response, its items, the tools "
        "and the rendered tokens.",
    ),
    "previous_response_id": (
        "idea",
        "The request field that continues a conversation from an earlier response instead of resending it.",
    ),
    "API service": (
        "bucket",
        "Everything between the client and the GPU: the stages marked 'stage: api' here, network included.",
    ),
    "inference": (
        "bucket",
        "The GPU's part of a turn: queue, prefill and decode.",
    ),
    "client": (
        "bucket",
        "The agent's own part of a turn: building requests and running tools.",
    ),
    "TTFT": (
        "measure",
        "Time to first token: from the client's send to the first output token it receives.",
    ),
    "end to end": (
        "measure",
        "From the first request's send to the last response's end: the time a user waits for a rollout.",
    ),
    "API share": (
        "measure",
        "The API service's part of end to end (a turn's wall time less inference and the client).",
    ),
    "baseline": (
        "idea",
        "The design a saving is measured against: naive (before any work) or sprint (the HTTP API "
        "after the sprint).",
    ),
    "prior": (
        "idea",
        "In a fit, what an unknown is taken to be before the figures are read: a value, and how far "
        "the fit may move it.",
    ),
    "residual": (
        "measure",
        "In a fit, how far the fitted outcome lands from a published figure, in percentage points.",
    ),
    "held out": (
        "idea",
        "A published figure a fit does not use: its residual is what the fitted profile predicts for "
        "it, set beside the figure.",
    ),
}


def _kind(step: str) -> str:
    if step in CLIENT_INSTANTS:
        return "instant: client"
    return f"stage: {bucket_of(step)}"


def glossary() -> pd.DataFrame:
    """Every stage, client step and idea the notebooks name: its kind and what it means.

        glossary().loc[["prefill", "render", "TTFT"]]
    """
    rows = [(str(s), _kind(s), DEFINITIONS[s]) for s in (*Stage, *ClientStep) if s is not ClientStep.OBSERVE]
    rows += [(term, kind, meaning) for term, (kind, meaning) in IDEAS.items()]
    return pd.DataFrame(rows, columns=["term", "kind", "meaning"]).set_index("term")


def define(terms: Sequence[str]) -> Styler:
    """The glossary's rows for ``terms``, as a notebook shows them: in full, left-aligned.

        define(["turn", "TTFT", "prefix cache"])
    """
    return glossary().loc[list(terms)].style.set_properties(**{"text-align": "left"})


def markdown() -> str:
    """The glossary as a Markdown table, as the instructor guide prints it.

    >>> markdown().splitlines()[0]
    '| term | kind | meaning |'
    """
    lines = ["| term | kind | meaning |", "|---|---|---|"]
    lines += [f"| `{term}` | {row.kind} | {row.meaning} |" for term, row in glossary().iterrows()]
    return "\n".join(lines) + "\n"
