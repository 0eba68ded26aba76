"""Shared fixtures: a real ``labkit serve`` subprocess on loopback, and official SDK clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from labkit.server.handle import LabkitServer

API_KEY = "sk-labkit-test"


@pytest.fixture(scope="session")
def server() -> Iterator[LabkitServer]:
    """One server for the whole session (each test makes its own conversations)."""
    with LabkitServer() as srv:
        yield srv


@pytest.fixture
def client(server: LabkitServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as c:
        yield c


def auth_headers(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


READ_FILE_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file of the repository.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}
