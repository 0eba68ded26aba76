"""One simulated GPU replica: prefill what the prefix cache lacks, then decode at the model's pace.

The tokens are real (tiktoken ids of real text) and so is the cache
bookkeeping; only the time the accelerator would take is modeled, from the
model's ``prefill_tps`` and ``decode_tps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.engine import timing
from labkit.engine.catalogue import ModelSpec
from labkit.engine.clock import DecodeClock
from labkit.engine.prefix_cache import CacheWork, PrefixCache


@dataclass(frozen=True)
class Prefill:
    prompt_tokens: int
    cached_tokens: int
    seconds: float
    work: CacheWork = field(default_factory=CacheWork)  # the prefix cache's bookkeeping for it

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


class Replica:
    """An engine replica with its own prefix (KV) cache, as one GPU would have."""

    def __init__(self, name: str = "replica-0", cache: PrefixCache | None = None) -> None:
        self.name = name
        self.cache = cache if cache is not None else PrefixCache()  # an empty cache is falsy (len 0)

    async def prefill(
        self, model: ModelSpec, tokens: Sequence[int], known: Sequence[int] = (), *, tail: Sequence[int] = ()
    ) -> Prefill:
        """Look the prompt ``tokens + tail`` up in the cache, spend the time for the rest, cache it.

        ``known``: block hashes already computed for a prefix of the prompt (see ``PrefixCache``);
        ``tail``: what follows the conversation (the generation prompt), kept apart so the
        conversation is never copied to add it.
        """
        work = CacheWork()
        cached = self.cache.lookup(tokens, known, tail=tail, work=work)
        prompt_tokens = len(tokens) + len(tail)
        seconds = model.prefill_seconds(prompt_tokens - cached)
        if seconds > 0:
            await timing.sleep(seconds)
        self.cache.insert(tokens, known, tail=tail, work=work)
        return Prefill(prompt_tokens, cached, seconds, work)

    def decode(self, model: ModelSpec) -> DecodeClock:
        """A clock for one response's output; pace every output item through it."""
        return DecodeClock(model.decode_tps)

    def retain(
        self, tokens: Sequence[int], known: Sequence[int] = (), work: CacheWork | None = None
    ) -> list[int]:
        """Keep the KV of a finished turn (prompt and output) for the next turn; returns the hashes
        of the blocks after ``known``."""
        return self.cache.insert(tokens, known, work=work)
