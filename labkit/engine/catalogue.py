"""The model catalogue: model names mapped to their speeds and their context windows.

The built-in models live in ``models.toml`` beside this module. A TOML file of
the same shape (``[models.NAME]`` tables) adds models or overrides fields:

    [models.labkit-spark]
    decode_tps = 2000          # override one field of a built-in model

    [models.my-model]
    decode_tps = 300
    prefill_tps = 20000
    context_window = 32000     # optional: the GPT-5 family's window when left out
    max_output_tokens = 8000
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

BUILTIN_MODELS = Path(__file__).with_name("models.toml")
MODELS_ENV = "LABKIT_MODELS"


# The window of a model that names none: the GPT-5 family's as published (400,000 tokens, up to
# 128,000 of them output), the largest of the built-in models'.
DEFAULT_WINDOW = 400_000
DEFAULT_MAX_OUTPUT = 128_000


# The share of a model's input limit past which a response compacts first, unless told otherwise.
COMPACT_AT = 0.8


@dataclass(frozen=True)
class ModelSpec:
    """A model: its speeds, and its context window with the part of it kept for the output.

    >>> spark = ModelSpec("spark", 1000, 50000, context_window=128_000, max_output_tokens=32_768)
    >>> spark.input_limit
    95232
    """

    name: str
    decode_tps: float
    prefill_tps: float
    description: str = ""
    context_window: int = DEFAULT_WINDOW  # tokens one response holds, input and output together
    max_output_tokens: int = DEFAULT_MAX_OUTPUT  # the part of the window kept for the output

    def prefill_seconds(self, uncached_tokens: int) -> float:
        return uncached_tokens / self.prefill_tps

    @property
    def input_limit(self) -> int:
        """The most input tokens a response may read (``usage.input_tokens``): the window less
        the output's part, whatever the request's own ``max_output_tokens`` (as the API's
        reference says of ``truncation``)."""
        return self.context_window - self.max_output_tokens

    @property
    def compact_threshold(self) -> int:
        """Where a response compacts first when ``context_management`` names compaction without a
        ``compact_threshold``: at ``COMPACT_AT`` of the input limit (labkit's choice), so a
        conversation compacts before its model would refuse it.

        >>> spark = ModelSpec("spark", 1000, 50000, context_window=128_000, max_output_tokens=32_768)
        >>> spark.compact_threshold
        76185
        """
        return int(self.input_limit * COMPACT_AT)


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
        window = _tokens(name, fields, "context_window", DEFAULT_WINDOW)
        output = _tokens(name, fields, "max_output_tokens", min(DEFAULT_MAX_OUTPUT, window // 2))
        if output >= window:
            raise ValueError(
                f"model '{name}' keeps max_output_tokens = {output} of a context_window of {window}: "
                "its input would have no room; keep less than the window for the output"
            )
        models[name] = ModelSpec(
            name=name,
            decode_tps=float(fields["decode_tps"]),
            prefill_tps=float(fields["prefill_tps"]),
            description=str(fields.get("description", "")),
            context_window=window,
            max_output_tokens=output,
        )
    return Catalogue(models)


def _tokens(name: str, fields: dict, key: str, default: int) -> int:
    """A model's token count ``key``: a positive integer, or ``default`` when it names none."""
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model '{name}' has {key} = {value!r}; use a positive whole number of tokens")
    return value


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
