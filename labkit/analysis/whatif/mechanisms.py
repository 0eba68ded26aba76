"""The saving split by mechanism: the sprint's changes, then WebSocket mode's, each switched on over
the ones before it in the articles' order, priced by the cost model."""

from __future__ import annotations

import itertools
import math
import textwrap
from dataclasses import replace
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


def crossover(
    settings: Settings, cpu: CpuCosts, rising: str = "connection cache", steady: str = "fast classifiers"
) -> float | None:
    """The CPU factor (``Settings.cpu_factor``: this machine's CPU costs times it) at which two
    mechanisms save the same, against naive; None if they never do at a positive factor.

    Every CPU cost scales with the factor and nothing else does, so each mechanism's saving is a
    straight line in it: two prices find where two lines meet.

    >>> from labkit.analysis.whatif import PRESETS
    >>> where = crossover(PRESETS["fast coding model (1,000 tokens/s)"], CpuCosts())
    >>> 0 < where < 5
    True
    """

    def gap(factor: float) -> float:
        table = mechanism_savings(replace(settings, cpu_factor=factor), cpu).set_index("mechanism")["saved_s"]
        return float(table[rising] - table[steady])

    at_1, at_2 = gap(1.0), gap(2.0)
    if math.isclose(at_1, at_2, abs_tol=1e-9):
        return None
    where = 1.0 - at_1 / (at_2 - at_1)
    return where if where > 0 else None


def largest_by_cpu(settings: Settings, cpu: CpuCosts) -> str:
    """In words, for these settings: which mechanism saves the most on this CPU, and where the
    connection cache and the fast classifiers trade places as the CPU gets slower or faster.

    >>> from labkit.analysis.whatif import PRESETS
    >>> said = largest_by_cpu(PRESETS["fast coding model (1,000 tokens/s)"], CpuCosts())
    >>> "on a slower CPU the connection" in said.replace("\\n", " ")
    True
    """
    saved = mechanism_savings(settings, cpu).set_index("mechanism")["saved_s"]
    largest, per_1k = saved.idxmax(), cpu.per_1k_ms * settings.cpu_factor
    two = ("connection cache", "fast classifiers")
    others = [m for m in two if m != largest]
    said = (
        f"At CPU time × {settings.cpu_factor:g} ({per_1k:.2f} ms per 1k tokens scanned and tokenized) the "
        f"model's largest single saving is the {largest} row, {saved[largest]:.2f} s; "
        + ", ".join(f"the {m} saves {saved[m]:.2f} s" for m in others)
        + "."
    )
    where = crossover(settings, cpu)
    if where is None:
        trade = "Those two do not trade places at any CPU speed."
    else:
        slower = "connection cache" if _saving_at(settings, cpu, 2 * where) else "fast classifiers"
        faster = "fast classifiers" if slower == "connection cache" else "connection cache"
        trade = (
            f"Those two save the same at CPU time × {where:.2f} ({cpu.per_1k_ms * where:.2f} ms per 1k "
            f"tokens): on a slower CPU the {slower} saves more, on a faster one the {faster}."
        )
    return "\n".join(textwrap.fill(sentence, WIDTH) for sentence in (said, trade))


WIDTH = 100  # characters of a printed line: a notebook's output does not wrap


def _saving_at(settings: Settings, cpu: CpuCosts, factor: float) -> bool:
    """Whether the connection cache saves more than the fast classifiers at ``factor``."""
    table = mechanism_savings(replace(settings, cpu_factor=factor), cpu).set_index("mechanism")["saved_s"]
    return bool(table["connection cache"] > table["fast classifiers"])
