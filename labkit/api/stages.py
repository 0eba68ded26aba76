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

    CONNECT = "connect"  # TCP + TLS handshakes, where a connection is really opened
    UPGRADE = "upgrade"  # WebSocket mode: the upgrade request and its answer
    UPLINK = "uplink"  # the request crossing the network
    AUTH = "auth"  # the key check and the auth service hop
    VALIDATION = "validation"  # the request body, checked
    HYDRATION = "hydration"  # the conversation so far, from the connection cache or the store
    INPUT_SAFETY = "input_safety"  # the classifier over input
    RENDER = "render"  # chat template and tokenization
    ROUTING = "routing"  # model configuration and the choice of a replica
    INTERMEDIARY = "intermediary"  # the hop through an intermediary service
    DOWNLINK = "downlink"  # the answer's first byte crossing the network
    QUEUE = "queue"  # waiting for a slot on the replica
    PREFILL = "prefill"  # prompt tokens the prefix cache lacks
    DECODE = "decode"  # sampling at the model's pace
    OUTPUT_SAFETY = "output_safety"  # the classifier over the output
    RETAIN = "retain"  # the conversation's KV and rendering kept for next time
    STORAGE = "storage"  # the response written to the store (store=true)
    BILLING = "billing"  # one ledger row


class ClientStep(StrEnum):
    """What the client's side of a turn records: two stages and four instants (and, when a
    notebook watches a rollout live, the time it spent fetching the turn's spans)."""

    BUILD = "build"  # building the request
    TOOL = "tool"  # running one tool
    OBSERVE = "observe"  # fetching the turn's spans to draw them: not the agent's time
    SEND = "send"
    FIRST_DELTA = "first_delta"
    LAST_DELTA = "last_delta"
    DONE = "done"


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
