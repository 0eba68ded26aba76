"""The wire's event types, named once for the server, the client and the event sequence.

Nothing here imports anything, so every module of ``labkit.api`` may read it (``errors`` too).

    >>> TERMINAL_EVENT["completed"], RESPONSE_CREATED in TERMINAL_EVENTS
    ('response.completed', False)
"""

# What a client sends in WebSocket mode.
RESPONSE_CREATE = "response.create"
RESPONSE_APPEND = "response.append"  # labkit's appended rollouts (docs/appended.md)
RESPONSE_STEER = "response.steer"  # user input for a running response (docs/protocol.md §3.8)
RESPONSE_INJECT = "response.inject"  # tool outputs for a waiting response (the multi-agent beta)

# What the server sends, in the order a response sends them.
RESPONSE_CREATED = "response.created"
RESPONSE_IN_PROGRESS = "response.in_progress"
OUTPUT_ITEM_ADDED = "response.output_item.added"
CONTENT_PART_ADDED = "response.content_part.added"
OUTPUT_TEXT_DELTA = "response.output_text.delta"
ARGUMENTS_DELTA = "response.function_call_arguments.delta"
OUTPUT_TEXT_DONE = "response.output_text.done"
CONTENT_PART_DONE = "response.content_part.done"
ARGUMENTS_DONE = "response.function_call_arguments.done"
OUTPUT_ITEM_DONE = "response.output_item.done"
COMPACTION_COMPACTING = "response.compaction.compacting"  # context_management: a summary is sampled
RESPONSE_DONE = "response.done"  # labkit's appended rollouts: paused on function calls
TERMINAL_EVENT = {  # a response's status -> the event that ends it
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
}
RESPONSE_FAILED = TERMINAL_EVENT["failed"]
ERROR = "error"
# What answers a response.steer, on the target response's lane.
STEER_ACCEPTED = "response.steer.accepted"
STEER_PENDING = "response.steer.pending"
STEER_FAILED = "response.steer.failed"
# What answers a response.inject: committed to the response, or returned uncommitted.
INJECT_CREATED = "response.inject.created"
INJECT_FAILED = "response.inject.failed"

TERMINAL_EVENTS = tuple(TERMINAL_EVENT.values())
DELTA_EVENTS = (OUTPUT_TEXT_DELTA, ARGUMENTS_DELTA)
