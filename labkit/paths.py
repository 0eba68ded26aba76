"""Where labkit finds its data: the repository's ``data/`` (profiles, scenarios, the sample
repository, the agent's instructions), or the directory ``$LABKIT_DATA`` names."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "LABKIT_DATA"
REPO_DATA = Path(__file__).resolve().parents[1] / "data"


def default_data_dir() -> Path:
    return Path(os.environ.get(DATA_ENV) or REPO_DATA)
