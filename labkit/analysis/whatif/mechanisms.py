"""The saving split by mechanism: the sprint's changes, then WebSocket mode's, each switched on over
the ones before it in the articles' order, priced by the cost model."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import pandas as pd

from labkit.analysis.cost_model import CpuCosts
from labkit.analysis.tables import saved
from labkit.analysis.whatif.predictions import predict
from labkit.analysis.whatif.settings import Settings, saving_column


class Mechanism(NamedTuple):
    label: str  # the article's words for it
    design: str  # the design with it and every mechanism before it (a composed spec)
    part_of: str  # the named design it belongs to


# The sprint's three changes, then the socket's (its connection cache, and the billing it lets
# overlap), each switched on over the ones before it. The third is the sprint, the last WebSocket mode.
MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("cached rendered tokens + model config", "naive+render_cache+model_config_cache", "sprint"),
    Mechanism("no intermediary hop", "naive+render_cache+model_config_cache+no_intermediary", "sprint"),
    Mechanism("fast classifiers", "sprint", "sprint"),
    Mechanism("connection cache", "sprint+connection_cache", "websocket"),
    Mechanism("overlapped billing", "websocket", "websocket"),
)


def mechanism_savings(settings: Settings, cpu: CpuCosts, baseline: str = "naive") -> pd.DataFrame:
    """What each mechanism after ``baseline`` saves, added one at a time in the articles' order:
    ``mechanism, design, part_of, e2e_s`` (with it and those before it), ``saved_s`` (the seconds it
    takes off) and ``saving`` (as a share of the baseline's end to end). The rows add up to the
    saving of WebSocket mode against the baseline. A mechanism's share depends on the ones before it
    (a classifier that scans less history saves less), so the order is the articles'.

    >>> from labkit.analysis.whatif import PRESETS
    >>> table = mechanism_savings(PRESETS["fast coding model (1,000 tokens/s)"], CpuCosts(), "sprint")
    >>> list(table["mechanism"])
    ['connection cache', 'overlapped billing']
    """
    saving_column(baseline)  # a known baseline
    designs = [m.design for m in MECHANISMS]
    steps = MECHANISMS[designs.index(baseline) + 1 :] if baseline in designs else MECHANISMS
    chain = [baseline, *(m.design for m in steps)]
    e2e = predict(settings, cpu, chain).set_index("design")["e2e_s"]
    table = pd.DataFrame(
        {
            "mechanism": [m.label for m in steps],
            "design": [m.design for m in steps],
            "part_of": [m.part_of for m in steps],
        }
    )
    table["e2e_s"] = [e2e[design] for design in chain[1:]]
    table["saved_s"] = [e2e[before] - e2e[after] for before, after in itertools.pairwise(chain)]
    table["saving"] = table["saved_s"] / e2e[baseline]
    return table


def mechanism_table(mechanisms: pd.DataFrame, baseline: str = "naive") -> pd.DataFrame:
    """``mechanism_savings`` for people: per mechanism, the seconds it saves and its share."""
    rows = mechanisms.set_index("mechanism")
    return pd.DataFrame(
        {"part of": rows["part_of"], "saved (s)": rows["saved_s"], saved(baseline): rows["saving"]}
    )
