"""Latency profiles: the modeled delays of the API service, read from ``data/profiles/NAME.toml``.

A profile holds inputs only (a hop's latency, a classifier's cost per 1k
tokens, how many GPU replicas there are). A section that is one service's hop is named for it
(``RoutingHop``, ``IntermediaryHop``, ``BillingHop``), apart from the stage that waits it out
(``labkit.server.stages``) and the ledger it bills to (``labkit.server.stores.billing.Billing``).
Each field is documented in the profile files themselves. The server waits out these delays; the cost model
prices them (``labkit.analysis``): both read them here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from labkit.paths import builtin_data_dir

DEFAULT_PROFILE = "production-like"


@dataclass(frozen=True)
class Network:
    rtt_ms: float
    tcp_handshake_round_trips: int
    tls_handshake_round_trips: int

    def handshake_s(self) -> float:
        """Time to open a connection: ``(1 + 1) * 20 ms = 40 ms`` for TCP + TLS 1.3 at 20 ms RTT."""
        return (self.tcp_handshake_round_trips + self.tls_handshake_round_trips) * self.rtt_ms / 1000

    def one_way_s(self) -> float:
        return self.rtt_ms / 2000


@dataclass(frozen=True)
class Auth:
    hop_ms: float


@dataclass(frozen=True)
class Safety:
    hop_ms: float
    ms_per_1k_tokens: float
    fast_hop_ms: float
    fast_ms_per_1k_tokens: float

    def cost_s(self, tokens: int, *, fast: bool) -> float:
        """Modeled classifier time for scanning ``tokens``, standard or fast."""
        hop, per_1k = (
            (self.fast_hop_ms, self.fast_ms_per_1k_tokens) if fast else (self.hop_ms, self.ms_per_1k_tokens)
        )
        return (hop + per_1k * tokens / 1000) / 1000


@dataclass(frozen=True)
class RoutingHop:
    model_config_hop_ms: float


@dataclass(frozen=True)
class IntermediaryHop:
    hop_ms: float


@dataclass(frozen=True)
class BillingHop:
    hop_ms: float


@dataclass(frozen=True)
class Engine:
    replicas: int
    block_size: int
    cache_capacity_tokens: int
    max_concurrent: int


@dataclass(frozen=True)
class Profile:
    name: str
    network: Network
    auth: Auth
    safety: Safety
    routing: RoutingHop
    intermediary: IntermediaryHop
    billing: BillingHop
    engine: Engine


SECTIONS = {
    "network": Network,
    "auth": Auth,
    "safety": Safety,
    "routing": RoutingHop,
    "intermediary": IntermediaryHop,
    "billing": BillingHop,
    "engine": Engine,
}


# labkit's own profiles (its built-in data, not $LABKIT_DATA): found even when a custom
# data directory has none.
REPO_PROFILES = builtin_data_dir() / "profiles"


def profile_dirs(data_dir: Path) -> list[Path]:
    return [data_dir / "profiles", REPO_PROFILES]


def known_profiles(data_dir: Path) -> list[str]:
    return sorted({p.stem for d in profile_dirs(data_dir) for p in d.glob("*.toml")})


def profile_toml(profile: Profile) -> str:
    """A profile written back as TOML that ``load_profile`` reads (for a server started with
    settings chosen in code, such as a what-if).

    >>> text = profile_toml(load_profile("local", builtin_data_dir()))
    >>> text.splitlines()[:2]
    ['[network]', 'rtt_ms = 0']
    """
    lines = []
    for key in SECTIONS:
        lines.append(f"[{key}]")
        section = getattr(profile, key)
        lines += [f"{f.name} = {getattr(section, f.name)!r}" for f in fields(section)]
        lines.append("")
    return "\n".join(lines)


def load_profile(name_or_path: str, data_dir: Path) -> Profile:
    """A profile by name (``data/profiles/NAME.toml``) or by path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        found = [d / f"{name_or_path}.toml" for d in profile_dirs(data_dir)]
        path = next((p for p in found if p.is_file()), found[0])
    if not path.is_file():
        known = ", ".join(known_profiles(data_dir))
        raise ValueError(f"unknown profile '{name_or_path}'; known profiles: {known}")
    with path.open("rb") as f:
        raw = tomllib.load(f)
    sections = {}
    for key, cls in SECTIONS.items():
        table = raw.get(key)
        if table is None:
            raise ValueError(f"profile {path} lacks the [{key}] section")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in table]
        if missing:
            raise ValueError(f"profile {path} [{key}] lacks {', '.join(missing)}")
        sections[key] = cls(**{n: table[n] for n in names})
    return Profile(name=path.stem, **sections)
