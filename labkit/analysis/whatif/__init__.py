"""What-ifs: settings in, DataFrames out. The cost model's prediction for every design, and the
real measurement of the same point, with nothing but plain functions.

A ``Settings`` is a point in the space a learner explores: the model's speeds,
the network and each service hop, the classifiers' cost, the shape of the
rollout (turns, output per turn, tool output, instructions, tool time), and two
things about the world outside the designs: how much slower this machine's CPU
would be (``cpu_factor``) and how often a WebSocket client loses its connection
(``reconnect_rate``). ``predict`` prices it for every design instantly;
``measure`` starts a real server with a profile and a model built from the same
settings, runs a synthetic rollout of that shape under each design (a WebSocket
client dropping its socket on the reconnect turns), and returns what it measured.
``labkit.analysis.whatif_ui`` is only widgets around these.

    >>> point = PRESETS["fast coding model (1,000 tokens/s)"]
    >>> table = predict(point, cpu=CpuCosts())
    >>> list(table["design"])
    ['naive', 'sprint', 'websocket', 'appended']
    >>> e2e = table.set_index("design")["e2e_s"]
    >>> bool(e2e["websocket"] < e2e["sprint"] < e2e["naive"])
    True
"""

from labkit.analysis.cost_model import CpuCosts
from labkit.analysis.whatif.as_run import run_frame
from labkit.analysis.whatif.measure import (
    CLEARLY_APART,
    Ordering,
    against,
    comparison_table,
    measure,
    measure_rollouts,
    measured_table,
)
from labkit.analysis.whatif.mechanisms import (
    MECHANISMS,
    Mechanism,
    crossover,
    largest_by_cpu,
    mechanism_savings,
    mechanism_table,
)
from labkit.analysis.whatif.predictions import (
    breakdown,
    predict,
    predicted_rollouts,
    prediction_table,
    saving_by_speed,
    speed_where_saving_falls_below,
)
from labkit.analysis.whatif.settings import (
    BASELINES,
    MODEL,
    MODEL_ONLY,
    PRESETS,
    RANGES,
    Settings,
    reconnect_turns,
    saving_column,
)

__all__ = [
    "BASELINES",
    "CLEARLY_APART",
    "MECHANISMS",
    "MODEL",
    "MODEL_ONLY",
    "PRESETS",
    "RANGES",
    "CpuCosts",
    "Mechanism",
    "Ordering",
    "Settings",
    "against",
    "breakdown",
    "comparison_table",
    "crossover",
    "largest_by_cpu",
    "measure",
    "measure_rollouts",
    "measured_table",
    "mechanism_savings",
    "mechanism_table",
    "predict",
    "predicted_rollouts",
    "prediction_table",
    "reconnect_turns",
    "run_frame",
    "saving_by_speed",
    "saving_column",
    "speed_where_saving_falls_below",
]
