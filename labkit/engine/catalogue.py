"""The model catalogue: model names mapped to their speeds.

The built-in models live in ``models.toml`` beside this module. A TOML file of
the same shape (``[models.NAME]`` tables) adds models or overrides fields:

    [models.labkit-spark]
    decode_tps = 2000          # override one field of a built-in model

    [models.my-model]
    decode_tps = 300
    prefill_tps = 20000
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

BUILTIN_MODELS = Path(__file__).with_name("models.toml")
MODELS_ENV = "LABKIT_MODELS"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    decode_tps: float
    prefill_tps: float
    description: str = ""

    def prefill_seconds(self, uncached_tokens: int) -> float:
        return uncached_tokens / self.prefill_tps


class UnknownModel(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"The model '{name}' does not exist. Available models: {', '.join(sorted(known))}.")
        self.name = name


class Catalogue:
    def __init__(self, models: dict[str, ModelSpec]) -> None:
        self.models = models

    def resolve(self, name: str) -> ModelSpec:
        try:
            return self.models[name]
        except KeyError:
            raise UnknownModel(name, list(self.models)) from None

    def names(self) -> list[str]:
        return sorted(self.models)


def _read(path: Path) -> dict[str, dict]:
    with path.open("rb") as f:
        return tomllib.load(f).get("models", {})


def load_catalogue(extra: str | os.PathLike | None = None) -> Catalogue:
    """Built-in models, then ``extra`` (or ``$LABKIT_MODELS``) merged over them."""
    tables = _read(BUILTIN_MODELS)
    extra = extra or os.environ.get(MODELS_ENV)
    if extra:
        for name, fields in _read(Path(extra)).items():
            tables[name] = {**tables.get(name, {}), **fields}
    models = {}
    for name, fields in tables.items():
        if "decode_tps" not in fields or "prefill_tps" not in fields:
            raise ValueError(f"model '{name}' needs decode_tps and prefill_tps")
        models[name] = ModelSpec(
            name=name,
            decode_tps=float(fields["decode_tps"]),
            prefill_tps=float(fields["prefill_tps"]),
            description=str(fields.get("description", "")),
        )
    return Catalogue(models)


# A replayed session is long, so ``labkit replay`` runs the two speeds the story turns on,
# the GPT-5 era's and the fast coding model's, and leaves out the production peak.
REPLAY_MODELS = ("labkit-classic", "labkit-spark")


def builtin_speeds(names: tuple[str, ...] | None = None) -> tuple[int, ...]:
    """Built-in models' decode speeds, slowest first: all of them (what ``labkit compare`` runs)
    or those of ``names``.

    >>> builtin_speeds(), builtin_speeds(REPLAY_MODELS)
    ((65, 1000, 4000), (65, 1000))
    """
    tables = _read(BUILTIN_MODELS)
    chosen = tables.values() if names is None else (tables[name] for name in names)
    return tuple(sorted(round(float(fields["decode_tps"])) for fields in chosen))
