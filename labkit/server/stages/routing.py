"""Model resolution and routing to an engine replica.

Each replica is a GPU with its own prefix cache. A stateless request goes to
the replica its ``prompt_cache_key`` hashes to (so a conversation keeps
landing where its prefix is cached) or, without one, to the next replica in
turn. A WebSocket connection is pinned to the replica of its first response.

A replica's prefix cache is shared by every key, as a GPU's memory is, but a
request sees it through its owner's view (``PrefixCache.scoped``): the same
prompt from another key is never a hit, so ``cached_tokens`` says nothing about
what anyone else sent. The owner is the one ``pick`` is given: the turn's, whom the
auth stage authenticated.

Resolving a model name means fetching its configuration: a modeled hop to a
configuration service, which the sprint replaced by an in-memory cache.
"""

from __future__ import annotations

import hashlib
import itertools

from labkit.engine.catalogue import Catalogue, ModelSpec
from labkit.engine.inference import Replica
from labkit.engine.prefix_cache import PrefixCache


class Router:
    def __init__(
        self, catalogue: Catalogue, replicas: int, *, block_size: int, cache_capacity_tokens: int
    ) -> None:
        self.catalogue = catalogue
        self.replicas = [
            Replica(f"replica-{i}", PrefixCache(block_size, cache_capacity_tokens)) for i in range(replicas)
        ]
        self._turns = itertools.cycle(range(replicas))
        self._config_cache: dict[str, ModelSpec] = {}

    def cached_config(self, name: str) -> ModelSpec | None:
        return self._config_cache.get(name)

    def fetch_config(self, name: str) -> ModelSpec:
        """Resolve the model in the catalogue (raises ``UnknownModel``) and cache it."""
        spec = self.catalogue.resolve(name)
        self._config_cache[name] = spec
        return spec

    def pick(self, prompt_cache_key: str | None, owner: str | None = None) -> Replica:
        """The replica for a request (by cache key if it has one, else round robin), as its
        owner sees it: the same GPU and slots, the owner's view of its prefix cache.

        Without ``owner``, the replica itself: every key's view at once.
        """
        replica = self._choose(prompt_cache_key)
        return replica if owner is None else Replica(replica.name, replica.cache.scoped(owner))

    def _choose(self, prompt_cache_key: str | None) -> Replica:
        if prompt_cache_key:
            digest = hashlib.sha256(prompt_cache_key.encode()).digest()
            return self.replicas[int.from_bytes(digest[:8], "big") % len(self.replicas)]
        return self.replicas[next(self._turns)]
