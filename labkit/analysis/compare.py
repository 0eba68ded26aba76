"""``labkit compare``: every design on the same scenario and model speeds, side by side in one run.

One server (one profile) serves every rollout. The designs take turns turn by turn, as the
notebooks' rollouts do (``labkit.client.agent.take_turns``): every design plays turn *t* before
any plays turn *t* + 1, so a machine that gets busier or quieter meanwhile touches them all
alike, where whole rollouts one after another would each meet another machine. Each rollout
starts cold (its own session line heads the instructions), as a new session would. The figures
are medians over ``repeat`` rounds; ``labkit.cli.compare`` prints them.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from labkit.analysis.metrics import summary
from labkit.analysis.saving import share_saved
from labkit.client.agent import Rollout, take_turns
from labkit.client.launcher import LabkitServer
from labkit.designs import DESIGNS
from labkit.engine.catalogue import Catalogue, ModelSpec, builtin_speeds, load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import DEFAULT_PROFILE
from labkit.scenarios import DEFAULT_SCENARIO, Scenario, load_scenario, synthetic

DEFAULT_TPS = builtin_speeds()


@dataclass
class Row:
    design: str
    tps: float
    model: str
    e2e_s: float
    ttft_mean_s: float
    api_share: float
    saved_vs_naive: float  # the share of naive's end-to-end time saved (labkit.analysis.saving)
    ttft_cut_vs_naive: float  # the share of naive's mean TTFT saved
    turns: int
    runs: int


def models_for(tps_values: Sequence[float], catalogue: Catalogue) -> tuple[dict[float, str], str]:
    """A model name per speed: a catalogue model with that decode speed, else ``labkit-tps-N``.

    Added models take the prefill speed of the catalogue model nearest in decode speed.
    Returns the names and the TOML text that defines the added ones ("" if none).
    """
    names, toml = {}, []
    for tps in dict.fromkeys(tps_values):
        nearest = model_near(tps, catalogue)
        if nearest.decode_tps == tps:
            names[tps] = nearest.name
            continue
        name = f"labkit-tps-{_plain(tps)}"
        names[tps] = name
        toml.append(f'[models."{name}"]\ndecode_tps = {tps}\nprefill_tps = {nearest.prefill_tps}\n')
    return names, "\n".join(toml)


def model_near(tps: float, catalogue: Catalogue) -> ModelSpec:
    """The catalogue model with this decode speed, else the one nearest to it (an added model
    takes its prefill speed).

    >>> model_near(1000, load_catalogue()).name, model_near(300, load_catalogue()).name
    ('labkit-spark', 'labkit-classic')
    """
    return min(catalogue.models.values(), key=lambda s: abs(s.decode_tps - tps))


def _plain(number: float) -> str:
    """A number in plain digits: ``_plain(1234567.0) -> '1234567'``, ``_plain(2.5) -> '2.5'``."""
    return f"{number:f}".rstrip("0").rstrip(".")


def run_designs(
    *,
    tps: Sequence[float] = DEFAULT_TPS,
    scenario: str | Scenario = DEFAULT_SCENARIO,
    profile: str = DEFAULT_PROFILE,
    repeat: int = 1,
    designs: Sequence[str] = tuple(DESIGNS),
    fresh_connection: bool = False,
    data_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    server_args: Sequence[str] = (),
    server_env: dict[str, str] | None = None,
) -> list[Row]:
    """Run every design at every speed; one row per (speed, design).

    ``scenario``: a name, or a scenario already loaded (a replay's, whose steps the server finds
    through ``server_env``); ``server_args``: more ``labkit serve`` options.
    """
    data_dir = data_dir or default_data_dir()
    tps = list(dict.fromkeys(tps))  # a speed named twice is run once
    designs = list(dict.fromkeys(designs))  # and a design
    script = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, data_dir)
    names, extra_models = models_for(tps, load_catalogue())
    with tempfile.TemporaryDirectory(prefix="labkit-compare-") as tmp:
        args = ["--profile", profile, *server_args]
        if extra_models:
            models_file = Path(tmp) / "models.toml"
            models_file.write_text(extra_models)
            args += ["--models", str(models_file)]
        runs: dict[tuple[float, str], list[dict[str, Any]]] = {}
        fresh = fresh_connection
        with LabkitServer(args=args, db=Path(tmp) / "responses.sqlite3", env=server_env) as server:
            warm_up(server.base_url, designs)
            for speed in tps:
                for n in range(repeat):
                    model = names[speed]
                    played = alternated(server.base_url, designs, script, model=model, fresh_connection=fresh)
                    for design, rollout in played.items():
                        result = summary(rollout.frame())
                        runs.setdefault((speed, design), []).append(result)
                        if progress:
                            progress(
                                f"{design:>9} @ {speed:g} tok/s  run {n + 1}/{repeat}: "
                                f"{result['e2e_s']:.2f} s end to end, {result['turns']} turns"
                            )
    return median_rows(runs, names, designs)


def alternated(
    base_url: str, designs: Sequence[str], scenario: Scenario, **options: Any
) -> dict[str, Rollout]:
    """Every design's whole rollout of ``scenario``, played turn by turn (``take_turns``)."""
    played: dict[str, Rollout] = {}
    for played in take_turns(base_url, designs, scenario, **options):  # noqa: B007 (the last round)
        pass
    return played


def warm_up(base_url: str, designs: Sequence[str]) -> None:
    """One short rollout per design first, so no design pays the client's and server's
    first-use costs (imports, connection pools) inside a measured run."""
    tiny = synthetic(turns=2, output_tokens=8, tool_tokens=16, instruction_tokens=32)
    for design in designs:
        Rollout.run(base_url, design, tiny)


def median_rows(
    runs: dict[tuple[float, str], list[dict[str, Any]]], names: dict[float, str], designs: Sequence[str]
) -> list[Row]:
    rows = []
    for speed, model in names.items():
        medians = {
            d: {k: statistics.median(r[k] for r in runs[(speed, d)]) for k in runs[(speed, d)][0]}
            for d in designs
        }
        base = medians.get("naive")
        for design in designs:
            m = medians[design]
            rows.append(
                Row(
                    design=design,
                    tps=speed,
                    model=model,
                    e2e_s=m["e2e_s"],
                    ttft_mean_s=m["ttft_mean_s"],
                    api_share=m["api_share"],
                    saved_vs_naive=share_saved(m["e2e_s"], base["e2e_s"] if base else None),
                    ttft_cut_vs_naive=share_saved(m["ttft_mean_s"], base["ttft_mean_s"] if base else None),
                    turns=round(m["turns"]),
                    runs=len(runs[(speed, design)]),
                )
            )
    return rows


def rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
