"""A workshop room's shared server, joined from a notebook instead of starting one of its own.

An instructor runs one ``labkit serve`` for the room and hands out its address and a key per
learner. With those in the environment, every notebook uses that server:

    LABKIT_URL=http://10.0.0.5:8765 LABKIT_API_KEY=sk-room-ada jupyter lab notebooks/

``LABKIT_URL`` is the server's root (``/v1`` is added); ``LABKIT_API_KEY`` is the key every
labkit client sends (rollouts, span fetches, the what-if lab's watchers), in a room or not.
Without ``LABKIT_URL`` nothing changes: a notebook starts a server of its own.

A ``RoomServer`` looks like a ``LabkitServer`` to a notebook (``base_url``, ``ws_url``,
``api_key``, ``close``) but owns nothing: closing it leaves the room's server running, and
what would reconfigure or restart a server cannot be done on a shared one (``shared`` says
which kind a notebook holds).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

URL_ENV = "LABKIT_URL"
KEY_ENV = "LABKIT_API_KEY"
DEFAULT_KEY = "sk-labkit-agent"  # what a client sends when nobody gave it a key
JOIN_TIMEOUT_S = 10.0


class RoomError(RuntimeError):
    """The room's server cannot be used as asked: one sentence, with what to do."""


def client_key() -> str:
    """The key labkit's clients send: ``$LABKIT_API_KEY``, else a fixed local one.

        client_key()        # 'sk-room-ada' in a room, 'sk-labkit-agent' elsewhere
    """
    return os.environ.get(KEY_ENV, "").strip() or DEFAULT_KEY


def room_url() -> str | None:
    """``$LABKIT_URL`` without a trailing ``/`` or ``/v1``, or None when no room is set."""
    url = os.environ.get(URL_ENV, "").strip().rstrip("/")
    if not url:
        return None
    return url.removesuffix("/v1")


@dataclass
class RoomServer:
    """The room's server, as a notebook holds it: join with ``join()`` (or ``lab.server()``).

        room = RoomServer("http://10.0.0.5:8765", "sk-room-ada").join()
        client = OpenAI(base_url=room.base_url, api_key=room.api_key)
    """

    url: str
    api_key: str
    shared: bool = True

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1) + "/responses"

    def join(self) -> RoomServer:
        """Check the server answers and accepts this key; a clear ``RoomError`` if not."""
        if not self.url.startswith(("http://", "https://")):
            raise RoomError(f"{URL_ENV}={self.url!r} is not a server address: set it like http://HOST:8765")
        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            answer = httpx.get(f"{self.base_url}/models", headers=headers, timeout=JOIN_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise RoomError(
                f"the room's server at {self.url} did not answer ({type(e).__name__}): "
                f"check {URL_ENV} with your instructor, or unset it to run a server of your own"
            ) from None
        if answer.status_code == 401:
            raise RoomError(f"the room's server at {self.url} refused the key in {KEY_ENV}: ask for your key")
        if answer.status_code != 200:
            status = answer.status_code
            raise RoomError(f"the room's server at {self.url} answered {status} to GET /v1/models")
        return self

    def start(self) -> RoomServer:
        return self.join()

    def close(self) -> None:
        """Nothing to stop: the room's server belongs to the instructor."""

    stop = close

    def restart(self) -> RoomServer:
        raise RoomError("the room's server is shared: it cannot be restarted from a notebook")

    def processes(self) -> list[int]:
        return []  # none of this machine's processes

    def __enter__(self) -> RoomServer:
        return self.join()

    def __exit__(self, *_exc: object) -> None:
        self.close()


def joined() -> RoomServer | None:
    """The room named by ``$LABKIT_URL``, joined with ``client_key()``; None without a room."""
    url = room_url()
    if url is None:
        return None
    return RoomServer(url, client_key()).join()
