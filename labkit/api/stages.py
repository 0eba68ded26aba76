"""The names of the stages a response passes through, and the bucket each one's time falls in.

One vocabulary for the server's spans (``GET /v1/labkit/traces``), the
client's own steps, the rollout DataFrames and the cost model, so they can
never drift apart. The buckets are the articles' split of a turn's time:
the API service (the network included), inference, and the client.

    >>> Stage.INPUT_SAFETY == "input_safety", bucket_of(Stage.PREFILL), bucket_of("tool")
    (True, 'inference', 'client')
"""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """Server stages, in the order a response meets them.

    >>> [str(s) for s in Stage][:3]
    ['connect', 'upgrade', 'uplink']
    """

    CONNECT = "connect"
    UPGRADE = "upgrade"
    UPLINK = "uplink"
    AUTH = "auth"
    VALIDATION = "validation"
    HYDRATION = "hydration"
    INPUT_SAFETY = "input_safety"
    RENDER = "render"
    ROUTING = "routing"
    INTERMEDIARY = "intermediary"
    DOWNLINK = "downlink"
    QUEUE = "queue"
    PREFILL = "prefill"
    DECODE = "decode"
    OUTPUT_SAFETY = "output_safety"
    RETAIN = "retain"
    STORAGE = "storage"
    BILLING = "billing"


class ClientStep(StrEnum):
    """What the client's side of a turn records: two stages and four instants (and, when a
    notebook watches a rollout live, the time it spent fetching the turn's spans)."""

    BUILD = "build"
    TOOL = "tool"
    OBSERVE = "observe"
    SEND = "send"
    FIRST_DELTA = "first_delta"
    LAST_DELTA = "last_delta"
    DONE = "done"


class Source(StrEnum):
    """Where a stage found what it did not have to do again: the ``source`` detail of a
    hydration span and the ``cache`` detail of a render span (one vocabulary for both).

    >>> Source.CONNECTION_CACHE == "connection_cache", str(Source.RENDER_CACHE)
    (True, 'render_cache')
    """

    CONNECTION_CACHE = "connection_cache"  # the previous response, kept on the WebSocket connection
    RENDER_CACHE = "render_cache"  # render: the server's renderings, found by conversation prefix
    STORE = "store"  # hydration: the response store
    RESPONSE = "response"  # render: an appended rollout resuming on its own rendering
    MISS = "miss"  # render: the render cache was asked and held no prefix of the conversation
    NONE = "none"  # hydration: no previous response; render: the design asks no cache


# What each stage and client step is, in one sentence: the one source for code comments, the
# notebooks' glossary (``lab.glossary()``) and the instructor guide.
DEFINITIONS: dict[str, str] = {
    Stage.CONNECT: "Opening a connection: the TCP and TLS handshakes, paid only where a new one opens.",
    Stage.UPGRADE: "WebSocket mode only: the HTTP request that turns a connection into a WebSocket.",
    Stage.UPLINK: "The request crossing the network from the client to the API service.",
    Stage.AUTH: "Checking the API key, including the hop to an auth service.",
    Stage.VALIDATION: "Checking the request body against the API's rules (types, limits, tool schemas).",
    Stage.HYDRATION: "Finding the conversation so far: from the connection's cache, or from the store.",
    Stage.INPUT_SAFETY: "A safety classifier reading the input it has not vouched for yet.",
    Stage.RENDER: "Turning the conversation into the model's prompt: chat template and tokenization.",
    Stage.ROUTING: "Resolving the model's configuration and choosing a replica (a GPU server) for it.",
    Stage.INTERMEDIARY: "The extra hop through an intermediary service on the way to inference.",
    Stage.DOWNLINK: "The network's one-way delay back to the client, paid once, before a response's first"
    " event (response.created, sent before inference starts): every event after it, the first token"
    " included, reaches the client that much later.",
    Stage.QUEUE: "Waiting for a free slot on the chosen replica.",
    Stage.PREFILL: "The GPU reading the prompt tokens its prefix cache does not already hold.",
    Stage.DECODE: "The GPU sampling the output, one token at a time, at the model's speed.",
    Stage.OUTPUT_SAFETY: "A safety classifier reading the model's output.",
    Stage.RETAIN: "Keeping the conversation's KV cache and rendered tokens for the next turn.",
    Stage.STORAGE: "Writing the response to the store (SQLite here), when the request says store=true.",
    Stage.BILLING: "Writing one usage row to the ledger.",
    ClientStep.BUILD: "The client building its next request (serializing the history it sends).",
    ClientStep.TOOL: "The client running one tool call on the learner's machine.",
    ClientStep.OBSERVE: "A notebook fetching a turn's spans to draw them live: left out of every metric.",
    ClientStep.SEND: "The instant the client sends a request.",
    ClientStep.FIRST_DELTA: "The instant the first output token reaches the client.",
    ClientStep.LAST_DELTA: "The instant the last output token reaches the client.",
    ClientStep.DONE: "The instant the response's terminal event reaches the client.",
}


INFERENCE_STAGES = (Stage.QUEUE, Stage.PREFILL, Stage.DECODE)
CLIENT_INSTANTS = (ClientStep.SEND, ClientStep.FIRST_DELTA, ClientStep.LAST_DELTA, ClientStep.DONE)
CLIENT_STAGES = (ClientStep.BUILD, ClientStep.TOOL)
CLIENT_STEPS = tuple(s for s in ClientStep if s is not ClientStep.OBSERVE)
BUCKETS = ("api", "inference", "client")
OBSERVER = "observer"  # the bucket of time spent watching a rollout, which the metrics leave out


def bucket_of(stage: str) -> str:
    """Where a stage's time goes: ``inference`` (queue, prefill, decode), ``client`` or ``api``.

    >>> bucket_of("render"), bucket_of("decode"), bucket_of("build")
    ('api', 'inference', 'client')
    """
    if stage in INFERENCE_STAGES:
        return "inference"
    if stage == ClientStep.OBSERVE:
        return OBSERVER
    if stage in CLIENT_STEPS:
        return "client"
    return "api"
