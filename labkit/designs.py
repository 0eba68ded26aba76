"""The four designs, and each design's stage plan: which stages run, when, and over what.

A design is a set of mechanisms, switched on by name, so each design reads as
the one before it plus a few changes:

| design    | the client                                 | what it adds                                  |
|-----------|--------------------------------------------|-----------------------------------------------|
| naive     | HTTP, the whole history every turn         | nothing: every stage over everything          |
| sprint    | the same                                   | render cache, model-config cache, no          |
|           |                                            | intermediary hop, fast classifiers            |
| websocket | one socket, previous_response_id + new     | the connection cache, overlapped billing      |
| appended  | one socket, one long response, the tool   | the whole rollout as one response             |
|           | outputs injected into it                   |                                               |

``Design.plan`` turns the mechanisms into a ``Plan``: for every stage (see
``labkit.api.stages``), whether it runs on every turn, the first, the last, or
is skipped, and whether it works over the whole history, only the new items, or
the new output. The server's pipeline reads the plan to decide what a stage
does; the cost model reads the same plan to price it; a test checks that a
real rollout records, turn by turn, the stages the plan names.

    >>> print(NAIVE.plan[Stage.INPUT_SAFETY], "|", WEBSOCKET.plan[Stage.INPUT_SAFETY])
    every turn, over the whole history | every turn, over the new items (fast classifier)

Designs also compose, so one mechanism can be measured at a time: ``compose``
reads a spec such as ``naive+render_cache+no_intermediary`` (a design's name,
then ``+part`` to switch a mechanism on, ``+no_part`` to switch it off), and
every place that takes a design's name takes a spec too.

One part changes no stage: ``appended+prototype_wire`` is the appended design
with its client on labkit's reconstruction of the prototype's events
(``response.done`` / ``response.append``) instead of the official SDK's beta
``response.inject``. Both wires run the same plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from labkit.api.stages import Stage

# ---------------------------------------------------------------- the plan of one design


class Runs(StrEnum):
    EVERY_TURN = "every turn"
    FIRST_TURN = "first turn"  # once per connection, or once per appended rollout
    LAST_TURN = "last turn"  # once per appended rollout, at its end
    SKIPPED = "skipped"  # on no turn: the design does without the stage


class Over(StrEnum):
    FIXED = "fixed"  # a hop or a round trip: the same cost whatever the size
    HISTORY = "the whole history"  # everything the conversation holds, again every turn
    NEW = "the new items"  # only what the client added since the previous turn
    OUTPUT = "the output"  # what the model sampled (an appended rollout: all of it, at the end)


@dataclass(frozen=True)
class Step:
    """What one stage does under a design."""

    runs: Runs
    over: Over = Over.FIXED
    saved_by: str = ""  # the mechanism that makes it cheap, if any
    overlapped: bool = False  # runs off the critical path, beside the next request
    stored_only: bool = False  # runs only for ``store=true`` requests

    def runs_on(self, turn: int, last: bool) -> bool:
        """Whether the stage runs on turn ``turn`` (0-based) of a rollout; ``last``: the final turn."""
        if self.runs is Runs.EVERY_TURN:
            return True
        if self.runs is Runs.FIRST_TURN:
            return turn == 0
        if self.runs is Runs.LAST_TURN:
            return last
        return False

    def __str__(self) -> str:
        text = str(self.runs)
        if self.runs is not Runs.SKIPPED and self.over is not Over.FIXED:
            text += f", over {self.over}"
        notes = [n for n in (self.saved_by, "overlapped" if self.overlapped else "") if n]
        if self.stored_only:
            notes.append("store=true only")
        return f"{text} ({', '.join(notes)})" if notes and self.runs is not Runs.SKIPPED else text


class Plan(Mapping[Stage, Step]):
    """Every stage's ``Step`` under one design, in the order a response meets the stages.

    ``steps`` names the stages the design decides. Any other stage takes its phase's default, here
    and nowhere else: after inference (after decode, in ``Stage`` order), the response's last
    segment, which is every turn but in an appended rollout, whose one response ends on its last
    turn (``after_inference``: ``plan_of``'s ``post``); before it, every turn. So a new stage needs
    no line in ``plan_of`` unless some design treats it differently.

    >>> plan = Plan({Stage.RENDER: Step(Runs.EVERY_TURN, Over.NEW)}, after_inference=Runs.LAST_TURN)
    >>> str(plan[Stage.RENDER]), str(plan[Stage.INPUT_SAFETY]), str(plan[Stage.BILLING])
    ('every turn, over the new items', 'every turn', 'last turn')
    """

    def __init__(self, steps: Mapping[Stage, Step], *, after_inference: Runs = Runs.EVERY_TURN) -> None:
        after = Step(after_inference)
        self._steps = {
            stage: steps.get(stage) or (after if _after_inference(stage) else Step(Runs.EVERY_TURN))
            for stage in Stage
        }

    def __getitem__(self, stage: Stage) -> Step:
        return self._steps[stage]

    def __iter__(self) -> Iterator[Stage]:
        return iter(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def stages_on(self, turn: int, last: bool, *, store: bool = False) -> list[Stage]:
        """The stages a rollout's turn runs, in order. An appended rollout's later turn runs
        neither the door's stages nor what its waiting response holds, nor what waits for its end:

        >>> first, later = (APPENDED.plan.stages_on(t, last=False) for t in (0, 1))
        >>> [str(s) for s in first if s not in later], later[-1]
        (['connect', 'upgrade', 'auth', 'hydration', 'routing'], <Stage.DECODE: 'decode'>)
        """
        return [
            stage
            for stage, step in self._steps.items()
            if step.runs_on(turn, last) and (store or not step.stored_only)
        ]


def _after_inference(stage: Stage) -> bool:
    """Whether ``stage`` comes after inference (after decode, in ``Stage`` order)."""
    order = list(Stage)
    return order.index(stage) > order.index(Stage.DECODE)


# ---------------------------------------------------------------- designs


@dataclass(frozen=True)
class Design:
    """A configuration of the one pipeline: the mechanisms it switches on.

    >>> WEBSOCKET.transport, WEBSOCKET.plan[Stage.BILLING].overlapped
    ('websocket', True)
    >>> replace(NAIVE, name="naive+render_cache", render_cache=True).plan[Stage.RENDER].over
    <Over.NEW: 'the new items'>
    """

    name: str
    render_cache: bool = False  # rendered tokens kept in memory, keyed by the conversation prefix
    model_config_cache: bool = False  # model configuration kept in memory after the first lookup
    intermediary_hop: bool = True  # inference reached through an intermediary service
    fast_classifiers: bool = False  # the sprint's faster safety stack
    connection_cache: bool = False  # one socket; the previous response's state kept on it
    overlapped_billing: bool = False  # billing overlapped with the next request instead of blocking
    appended: bool = False  # the whole rollout as one response, resumed by the client's tool outputs
    # ... sent as labkit's reconstruction of the prototype's response.append, not the beta
    # response.inject: the client's wire, not a stage (the plan is the same)
    prototype_wire: bool = False

    @property
    def transport(self) -> str:
        """How its client talks to the server: ``http`` (whole history) or ``websocket``."""
        return "websocket" if self.connection_cache or self.appended else "http"

    @cached_property
    def plan(self) -> Plan:
        return plan_of(self)


NAIVE = Design("naive")
SPRINT = replace(
    NAIVE,
    name="sprint",
    render_cache=True,
    model_config_cache=True,
    intermediary_hop=False,
    fast_classifiers=True,
)
WEBSOCKET = replace(SPRINT, name="websocket", connection_cache=True, overlapped_billing=True)
APPENDED = replace(WEBSOCKET, name="appended", appended=True)

DESIGNS = {d.name: d for d in (NAIVE, SPRINT, WEBSOCKET, APPENDED)}
DEFAULT_HTTP = SPRINT
DEFAULT_WEBSOCKET = WEBSOCKET


def plan_of(d: Design) -> Plan:
    """The one place that says what each mechanism changes, stage by stage (a stage it leaves out
    takes its phase's default: ``Plan``)."""
    socket = d.transport == "websocket"
    # An appended rollout's later segments skip the pre-inference work that the
    # paused response already holds, and its post-inference work waits for the end.
    pre = Runs.FIRST_TURN if d.appended else Runs.EVERY_TURN
    post = Runs.LAST_TURN if d.appended else Runs.EVERY_TURN
    seen_once = Over.NEW if socket else Over.HISTORY
    classifier = "fast classifier" if d.fast_classifiers else ""
    render_saved = "connection cache" if socket else "render cache" if d.render_cache else ""
    routing_saved = (
        "reused on the connection" if socket else "model-config cache" if d.model_config_cache else ""
    )
    return Plan(
        {
            Stage.CONNECT: Step(Runs.FIRST_TURN) if socket else Step(Runs.EVERY_TURN, saved_by="keep-alive"),
            Stage.UPGRADE: Step(Runs.FIRST_TURN if socket else Runs.SKIPPED),
            Stage.UPLINK: Step(Runs.EVERY_TURN),
            Stage.AUTH: Step(Runs.FIRST_TURN if socket else Runs.EVERY_TURN),
            Stage.VALIDATION: Step(Runs.EVERY_TURN, seen_once),
            Stage.HYDRATION: Step(pre, saved_by="connection cache" if socket and not d.appended else ""),
            Stage.INPUT_SAFETY: Step(Runs.EVERY_TURN, seen_once, saved_by=classifier),
            Stage.RENDER: Step(Runs.EVERY_TURN, Over.NEW if render_saved else Over.HISTORY, render_saved),
            Stage.ROUTING: Step(pre, saved_by="" if d.appended else routing_saved),
            Stage.INTERMEDIARY: Step(Runs.EVERY_TURN if d.intermediary_hop else Runs.SKIPPED),
            Stage.DOWNLINK: Step(Runs.EVERY_TURN),
            Stage.QUEUE: Step(Runs.EVERY_TURN),
            Stage.PREFILL: Step(Runs.EVERY_TURN, Over.NEW, saved_by="prefix cache"),
            Stage.DECODE: Step(Runs.EVERY_TURN, Over.OUTPUT),
            Stage.OUTPUT_SAFETY: Step(post, Over.OUTPUT, saved_by=classifier),
            Stage.RETAIN: Step(post, Over.OUTPUT),
            Stage.STORAGE: Step(post, Over.OUTPUT, stored_only=True),
            Stage.BILLING: Step(post, overlapped=d.overlapped_billing),
        },
        after_inference=post,
    )


def plan_rows(designs: Mapping[str, Design] | None = None) -> list[dict[str, Any]]:
    """The plans side by side: one row per stage, one column per design (for a table).

    >>> row = next(r for r in plan_rows() if r["stage"] == "render")
    >>> row["naive"], row["websocket"]
    ('every turn, over the whole history', 'every turn, over the new items (connection cache)')
    """
    chosen = designs or DESIGNS
    return [{"stage": str(stage), **{n: str(d.plan[stage]) for n, d in chosen.items()}} for stage in Stage]


# ---------------------------------------------------------------- composed designs

# A part is named after its field, except where the field's name says more than the switch.
_PART_NAMES = {"intermediary_hop": "intermediary"}
#: Each part (a mechanism's switch) and the ``Design`` field it sets, in the order of a canonical name.
SWITCHES: dict[str, str] = {
    _PART_NAMES.get(f.name, f.name): f.name for f in fields(Design) if f.name != "name"
}


class DesignSpecError(ValueError):
    """A design spec that names no design: an unknown base or part, or a part that is empty,
    repeated, contradicted, changes nothing, or needs a part the design lacks."""


def _known() -> str:
    return f"Known designs: {', '.join(DESIGNS)}; parts: {', '.join(SWITCHES)}, each also as no_<part>."


def compose(spec: str) -> Design:
    """The design a spec names: a design's name, then ``+part`` per mechanism to change.

    ``+part`` switches a mechanism on, ``+no_part`` switches it off (parts: ``SWITCHES``).
    A part that is empty, repeated, contradicted by another, or already the base's
    setting is a ``DesignSpecError``, so every part of a valid spec changes something;
    so is ``prototype_wire`` without ``appended``, whose wire it is.
    A composed design is named by its canonical spec (the base, then its parts in
    ``SWITCHES`` order), so equal specs give equal names; a bare name gives the named
    design itself. A spec is never renamed to another base's name: ``naive`` plus the
    sprint's four parts has the sprint's plan, under its own name.

    >>> compose("naive+fast_classifiers+render_cache").name
    'naive+render_cache+fast_classifiers'
    >>> compose("sprint") is SPRINT, compose("websocket+no_connection_cache").transport
    (True, 'http')
    >>> compose("naive+turbo")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    labkit.designs.DesignSpecError: Unknown labkit design part 'turbo' in 'naive+turbo'. Known designs: ...
    """
    base_name, *parts = (p.strip() for p in spec.split("+"))
    if not base_name:
        raise DesignSpecError(f"Missing labkit design name in '{spec}'. {_known()}")
    if base_name not in DESIGNS:
        named = f"'{base_name}' in '{spec}'" if parts else f"'{spec}'"
        raise DesignSpecError(f"Unknown labkit design {named}. {_known()}")
    base = DESIGNS[base_name]
    chosen: dict[str, str] = {}  # field -> the part that sets it
    for part in parts:
        if not part:
            raise DesignSpecError(f"Empty labkit design part in '{spec}'. {_known()}")
        switch, on = part.removeprefix("no_"), not part.startswith("no_")
        if switch not in SWITCHES:
            raise DesignSpecError(f"Unknown labkit design part '{part}' in '{spec}'. {_known()}")
        field_name = SWITCHES[switch]
        if field_name in chosen:
            earlier = chosen[field_name]
            clash = "appears twice" if earlier == part else f"contradicts '{earlier}'"
            raise DesignSpecError(f"Labkit design part '{part}' {clash} in '{spec}'.")
        if getattr(base, field_name) == on:
            raise DesignSpecError(
                f"Labkit design part '{part}' in '{spec}' changes nothing: "
                f"'{base_name}' already has {switch} {'on' if on else 'off'}."
            )
        chosen[field_name] = part
    if not chosen:
        return base
    ordered = [chosen[f] for f in SWITCHES.values() if f in chosen]
    changes = {f: not part.startswith("no_") for f, part in chosen.items()}
    design = replace(base, name="+".join([base_name, *ordered]), **changes)
    if design.prototype_wire and not design.appended:
        raise DesignSpecError(
            f"Labkit design part 'prototype_wire' in '{spec}' needs an appended design: it is the wire "
            "of the appended rollout."
        )
    return design


def select_design(spec: str | None, default: Design) -> Design:
    """The design a spec names (a name or a composed spec), or ``default`` when there is none;
    a bad spec is a ``DesignSpecError`` naming what is wrong (the server answers it as a 400).

    >>> select_design("naive+render_cache", SPRINT).plan[Stage.RENDER].saved_by
    'render cache'
    """
    return compose(spec) if spec else default
