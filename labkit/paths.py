"""Where labkit finds its data: profiles, scenarios, the agent's instructions, the sample repository.

One lookup, in this order:

1. the directory ``$LABKIT_DATA`` names, if it is set;
2. the copy shipped inside the package (``labkit/_data``), which a regular
   ``pip install .`` puts next to the code;
3. the repository's top-level ``data/``, for a source checkout or an editable
   install (``pip install -e .``), where the package has no copy of its own.

The last two are labkit's *built-in* data: :func:`builtin_data_dir` returns
whichever exists, regardless of ``$LABKIT_DATA``.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "LABKIT_DATA"

_PACKAGE_DIR = Path(__file__).resolve().parent
# data/ shipped as package data (labkit._data): present only in a non-editable install.
PACKAGED_DATA = _PACKAGE_DIR / "_data"
# The repository's data/: present in a source checkout and behind an editable install.
CHECKOUT_DATA = _PACKAGE_DIR.parent / "data"


def builtin_data_dir() -> Path:
    """labkit's own data: the packaged copy if this is an installed wheel, else the repository's."""
    return PACKAGED_DATA if PACKAGED_DATA.is_dir() else CHECKOUT_DATA


def default_data_dir() -> Path:
    """The data directory in use: ``$LABKIT_DATA`` if set, else :func:`builtin_data_dir`."""
    custom = os.environ.get(DATA_ENV)
    return Path(custom) if custom else builtin_data_dir()
