"""labkit for notebooks: everything a notebook uses, from one import, so one module by design.

    from labkit import lab

    print(lab.about())                               # labkit's version, this machine's cores
    server = lab.server()                            # the room's ($LABKIT_URL) or one of its own
    with lab.LabkitServer() as server:               # a real server, in its own process
        rollout = lab.Rollout.run(server.base_url, "websocket", "fix-failing-test")
    frame = rollout.frame()                          # one row per span, server and client
    lab.summary(frame)                               # end to end, mean TTFT, API share
    lab.turn_table(frame)                            # per turn: wall, TTFT, api, inference, client
    lab.stage_work(frame, ["input_safety", "render"])   # tokens each stage processed, per turn
    lab.plan_table()                                 # which stages each design runs, over what
    lab.predict("websocket").end_to_end              # the cost model, instantly

The names, grouped:

- serving: ``server`` (the room's shared server when ``$LABKIT_URL`` names one, else one of
  the notebook's own), ``LabkitServer``
- rollouts: ``Rollout`` (``run``, or ``play`` turn by turn), ``take_turns`` (several designs'
  rollouts of one task, turn *t* of each before turn *t* + 1 of any); ``Toolbox``
  (the agent's real tools, on a sandbox copy of the sample repository); ``fetch_spans``
  (the server's spans of any response, such as one an SDK client made); ``completed`` (an SDK
  WebSocket connection's response, once it completes; ``ResponseFailed`` otherwise),
  ``until_paused`` (the prototype's raw wire read until the response pauses or ends)
- designs: ``DESIGNS``, ``compose`` (``"naive+render_cache"``), ``plan_table``;
  ``wire_events`` (the events of one exchange over the prototype's wire, the launch's and the
  SDK's beta ``response.inject``, side by side)
- metrics: ``summary``, ``turn_table``, ``end_to_end``, ``stage_work`` (tokens a stage
  processed, per turn), ``stage_ms`` (milliseconds stages took, per turn), ``span_detail``;
  ``growth`` (how a turn's time grows with its history: a slope, its noise, a word when the run
  can tell; ``HISTORY_STAGES`` are the stages that read the whole history); ``saving`` (what
  a change saves per turn, two rollouts of one task set turn against turn, with its noise);
  ``compare`` (designs side by side, with units; medians of repeated runs from ``repeat``),
  ``styled`` (any such table, formatted by its units)
- the learner's part: ``glossary`` (every stage and idea, defined), ``define`` (some of its
  rows, shown in full), ``check_guess`` (a
  prediction against the measurement, in one sentence), ``decide`` (a word from a difference,
  or ``Undecided`` when the runs' noise is larger), ``Undecided`` (a run that could not decide,
  and why: ``check_guess`` neither confirms nor marks wrong against it), ``self_check`` (a
  notebook's closing questions graded, one line each, then how many were right or close),
  ``trend`` (a series' shape in words), ``claim`` (a lesson's claim checked against this run,
  counted by ``benchmarks/lesson_claims.py``)
- build it yourself: ``exercises`` (the story notebooks' exercises: the learner's code, or
  labkit's reference while it is still the skeleton, and each check's one-sentence verdict)
- the cost model: ``predict``, ``profile``, ``scenario``, ``shape``, ``cpu_costs``
- plots: ``plots`` (the standard figures), ``LivePlot`` (one of them, redrawn turn by turn),
  ``shown`` (wait until a browser has drawn live plots), ``show`` (a finished figure, static)
- what-ifs: ``whatif`` (settings in, DataFrames out), ``what_if_lab`` (its widgets),
  ``replay`` (a recorded agent session, Codex CLI or a transcript, through every design),
  ``replay_lab`` (its widgets: a recording priced at once, measured on a button)
- the inverse what-if: ``article_fit`` (the service's unknown delays fitted to the articles'
  figures: residuals of the fitted and the held-out ones, what the figures cannot pin down, the
  fitted profile)
- steering a running answer (WebSocket mode today): ``steering`` (``measure`` one correction,
  steered, waited for, or resent over HTTP; ``STRATEGIES``, ``MODELS``)
- the server's traces, live: ``watch_traces`` (into a live plot), ``TraceWatcher``
- the stage names and buckets: ``Stage``, ``bucket_of``

One side effect: importing ``lab`` sets ``pandas.options.display.max_colwidth = None``, so a
table's text (a quote, a stage's plan, a definition) is shown whole, in every front end and
export, never cut at pandas' 50 characters.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import platform
from collections import deque
from typing import TYPE_CHECKING, Any

import pandas as pd

from labkit import __version__
from labkit.analysis import exercises, frontend, plots, whatif
from labkit.analysis.claims import claim
from labkit.analysis.cost_model import Prediction
from labkit.analysis.cost_model import predict as _predict
from labkit.analysis.cpu_costs import CpuCosts
from labkit.analysis.frames import span_detail, stage_work
from labkit.analysis.glossary import define, glossary
from labkit.analysis.growth import HISTORY_STAGES, growth, stage_ms
from labkit.analysis.guesses import Undecided, decide, self_check, trend
from labkit.analysis.guesses import check as check_guess
from labkit.analysis.live import LivePlot, show, shown
from labkit.analysis.metrics import end_to_end, summary
from labkit.analysis.metrics import turns as turn_table
from labkit.analysis.paired import saving
from labkit.analysis.replay import replay
from labkit.analysis.shape import Shape
from labkit.analysis.tables import compare, styled
from labkit.api.stages import Stage, bucket_of
from labkit.client import steering
from labkit.client.agent import DEFAULT_MODEL, Rollout, Toolbox, fetch_spans, take_turns
from labkit.client.launcher import LabkitServer
from labkit.client.reading import ResponseFailed, completed, until_paused
from labkit.client.room import RoomServer, joined, learner_name, room_url, unread_variables
from labkit.client.trace_watch import TraceWatcher
from labkit.client.wires import side_by_side as wire_events
from labkit.designs import DESIGNS, Design, compose, plan_rows
from labkit.engine.catalogue import load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE, Profile, load_profile
from labkit.scenarios import DEFAULT_SCENARIO, Scenario, load_scenario

if TYPE_CHECKING:
    from labkit.analysis.fit import ArticleFit
    from labkit.analysis.replay_ui import ReplayLab
    from labkit.analysis.whatif_ui import WhatIfLab

# The side effect the module docstring states: labkit's tables carry sentences (the articles'
# quotes, the designs' plans, the glossary), which pandas would cut at 50 characters.
pd.set_option("display.max_colwidth", None)

__all__ = [
    "DESIGNS",
    "HISTORY_STAGES",
    "LabkitServer",
    "LivePlot",
    "ResponseFailed",
    "Rollout",
    "Stage",
    "Toolbox",
    "TraceWatcher",
    "Undecided",
    "about",
    "article_fit",
    "bucket_of",
    "check_guess",
    "claim",
    "compare",
    "completed",
    "compose",
    "cpu_costs",
    "decide",
    "define",
    "end_to_end",
    "exercises",
    "fetch_spans",
    "glossary",
    "growth",
    "plan_table",
    "plots",
    "predict",
    "profile",
    "repeat",
    "replay",
    "replay_lab",
    "saving",
    "scenario",
    "self_check",
    "server",
    "shape",
    "show",
    "shown",
    "span_detail",
    "stage_ms",
    "stage_work",
    "steering",
    "styled",
    "summary",
    "take_turns",
    "trend",
    "turn_table",
    "until_paused",
    "watch_traces",
    "what_if_lab",
    "whatif",
    "wire_events",
]


def about() -> str:
    """One line on what is running: labkit's version, Python, this machine's cores.

    In a notebook it also asks the front end, without waiting, whether it draws widgets
    (``labkit.analysis.frontend.ask``): live plots later learn the answer at no cost.

    >>> about().startswith("labkit ")
    True
    """
    frontend.ask()
    return f"labkit {__version__} · Python {platform.python_version()} · {os.cpu_count()} cores"


def server(
    *, args: list[str] | None = None, connection_cache: type | None = None, **options: Any
) -> LabkitServer | RoomServer:
    """The server a notebook uses: the room's, joined, when ``$LABKIT_URL`` names one (with the
    key in ``$LABKIT_API_KEY``); otherwise a ``LabkitServer`` of its own, started with ``args``
    and ``options``. Either way ``base_url``, ``api_key`` and ``close()`` work; ``shared`` says
    which it is (a room's server cannot be restarted or reconfigured from a notebook).

    labkit reads ``LABKIT_URL``, ``LABKIT_API_KEY`` and ``LABKIT_NAME`` (a name for the
    instructor's view), never the official SDK's ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``: with
    ``OPENAI_BASE_URL`` set and no ``LABKIT_URL`` it says so in one line, then starts its own. A
    room that cannot be joined is a ``RoomError`` of one sentence, never a server of its own.

        server = lab.server()
        client = OpenAI(base_url=server.base_url, api_key=server.api_key)

    ``connection_cache=MyCache`` (exercise 3): a server of the notebook's own whose WebSocket
    connections use the learner's class (``labkit serve --connection-cache``), even in a room:
    a learner's code never runs on the room's server.

        mine = lab.server(connection_cache=MyCache)
    """
    if connection_cache is not None:
        if joined_url := room_url():
            print(
                f"labkit: your connection cache runs on a server of this notebook's own, not on the "
                f"room's at {joined_url}"
            )
        return LabkitServer(args=args, connection_cache=connection_cache, **options).start()
    name = learner_name()  # a bad $LABKIT_NAME is one sentence now, not a failed request later
    room = joined()
    if room is None:
        notice = unread_variables()
        if notice:
            print(notice)
        return LabkitServer(args=args, **options).start()
    named = f" as {name}" if name else ""
    print(f"labkit: using the room's server at {room.url}{named} (key {room.api_key[:7]}…)")
    if args or options:
        wanted = " ".join([*(args or []), *(f"{k}={v}" for k, v in options.items())])
        print(f"labkit: the room's server keeps the instructor's settings; not applied here: {wanted}")
    return room


def plan_table(designs: list[str] | None = None) -> pd.DataFrame:
    """Each design's stage plan side by side: a row per stage, a column per design (names or specs).

    >>> table = plan_table(["naive", "websocket"])
    >>> table.loc["input_safety", "websocket"]
    'every turn, over the new items (fast classifier)'
    """
    chosen = {name: compose(name) for name in designs} if designs else None
    return pd.DataFrame(plan_rows(chosen)).set_index("stage")


def profile(name: str = DEFAULT_PROFILE) -> Profile:
    """A latency profile by name (``local``, ``production-like``) or TOML path.

    >>> profile("production-like").network.rtt_ms
    20
    """
    return load_profile(name, default_data_dir())


def scenario(name: str = DEFAULT_SCENARIO) -> Scenario:
    """A scenario by name, or a generated one: ``"synthetic:turns=20,tool_tokens=1000"``.

    >>> scenario("synthetic:turns=3").turns
    3
    """
    return load_scenario(name, default_data_dir())


@functools.cache
def shape(name: str = DEFAULT_SCENARIO) -> Shape:
    """A scenario's sizes for the cost model (its tools run once, on a sandbox copy; cached).

    >>> len(shape("synthetic:turns=4").turns)
    4
    """
    return Shape.of(scenario(name))


@functools.cache
def cpu_costs() -> CpuCosts:
    """This machine's CPU cost of tokenizing, scanning and building requests (measured once).

        costs = cpu_costs()
        print(f"{costs.scan_s_per_token * 1e6:.2f} ms to scan 1k tokens on this machine")
    """
    return CpuCosts.measure()


def predict(
    design: str | Design,
    *,
    profile_name: str = DEFAULT_PROFILE,
    scenario_name: str = DEFAULT_SCENARIO,
    model: str = DEFAULT_MODEL,
    decode_tps: float | None = None,
    prefill_tps: float | None = None,
    cpu: CpuCosts | None = None,
    fresh_connection: bool = False,
) -> Prediction:
    """The cost model's prediction for a design (a name or a composed spec), from names: no server runs.

    The model's speeds come from the catalogue unless ``decode_tps`` or
    ``prefill_tps`` override them; CPU costs are measured on this machine once.

    >>> p = predict("websocket", profile_name="local", scenario_name="synthetic:turns=3", cpu=CpuCosts())
    >>> len(p), p.end_to_end > 0
    (3, True)
    """
    spec = load_catalogue().resolve(model)
    return _predict(
        compose(design) if isinstance(design, str) else design,  # a name or a composed spec
        profile(profile_name),
        shape(scenario_name),
        decode_tps=decode_tps or spec.decode_tps,
        prefill_tps=prefill_tps or spec.prefill_tps,
        cpu=cpu or cpu_costs(),
        fresh_connection=fresh_connection,
    )


def repeat(
    base_url: str,
    designs: list[str],
    scenario: str | Scenario = DEFAULT_SCENARIO,
    *,
    runs: int = 3,
    **options: Any,
) -> dict[str, list[pd.DataFrame]]:
    """Each design's rollout ``runs`` times, the designs taking turns turn by turn within each run
    (``take_turns``: any drift of the machine touches them all alike): the frames, by design, for
    ``compare``.

        frames = repeat(server.base_url, ["websocket", "appended"], runs=3)
        styled(compare(frames, baseline="websocket"))   # medians, and their spread
    """
    if runs < 1:
        raise ValueError("repeat needs at least one run")
    frames: dict[str, list[pd.DataFrame]] = {design: [] for design in designs}
    for _ in range(runs):
        *_, finished = take_turns(base_url, designs, scenario, **options)  # played to the end
        for design, rollout in finished.items():
            frames[design].append(rollout.frame())
    return frames


def what_if_lab(settings: whatif.Settings | None = None) -> WhatIfLab:
    """The what-if lab's widgets (they need the notebook front end: ``pip install -e ".[notebooks]"``).

        ui = what_if_lab()
        display(ui.widget)
    """
    return _front_end("whatif_ui", "WhatIfLab")(settings, cpu=cpu_costs())


def replay_lab() -> ReplayLab:
    """The what-if lab's replay section: a recorded session (one of ``data/replays/``, or a path
    of your own) priced for every design and speed at once, measured on a button.

        replay_ui = replay_lab()
        display(replay_ui.widget)
    """
    return _front_end("replay_ui", "ReplayLab")(cpu=cpu_costs())


def _front_end(module: str, name: str) -> Any:
    """A widget class of the notebook front end, or one sentence saying which install has it."""
    try:
        return getattr(importlib.import_module(f"labkit.analysis.{module}"), name)
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"{name} needs the notebook front end, and {err.name} is not installed: "
            'pip install -e ".[notebooks]"'
        ) from None


def article_fit(figures: str = "fitted", reading: str | None = None, **changes: Any) -> ArticleFit:
    """The profile's unknown delays fitted to the articles' figures (``labkit fit`` in Python).

    ``figures``: ``"fitted"`` (the figures the fit file marks so; the others held out) or
    ``"all"``. ``reading``: how to read the figures whose baseline no source states, one of the
    fit file's readings (``"after-sprint"``, labkit's and the default, or ``"before-sprint"``).
    ``changes`` replace fields of the fit's inputs (``data/fits/articles.toml``), e.g.
    ``scenario="synthetic:turns=19,output_tokens=150"``.

        fit = article_fit()
        fit.residuals      # per figure, fitted or held out: the article's value, the outcome, the miss
        fit.unknowns       # per unknown: guess, fitted, what each outcome does when it moves, what is left
        fit.profile        # the fitted Profile; profile_text(fit) is the file labkit fit writes
        article_fit(reading="before-sprint").residuals   # the integrators against the API before the sprint
    """
    from dataclasses import replace

    from labkit.analysis.fit import fit_articles, read_inputs

    return fit_articles(replace(read_inputs(reading=reading), **changes), figures=figures)


def watch_traces(base_url: str, api_key: str, plot: LivePlot | None = None, keep: int = 30) -> TraceWatcher:
    """Subscribe to the server's finished responses; redraw ``plot`` with the last ``keep``.

    Traces arrive on a thread; the redraw is handed to the notebook's event loop, so the
    figure changes even while no cell runs, whoever sent the responses.

        timeline = LivePlot(plots.trace_timeline).show([])
        watcher = watch_traces(server.base_url, "sk-instructor", timeline)
        ...
        watcher.stop()
    """
    recent: deque[dict[str, Any]] = deque(maxlen=keep)
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    def redraw() -> None:
        if plot is not None:
            plot.update(list(recent))

    def on_trace(trace: dict[str, Any]) -> None:
        recent.append(trace)
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(redraw)
        else:
            redraw()

    return TraceWatcher(base_url, api_key, on_trace).start()
