"""A workshop room's shared server, joined from a notebook instead of starting one of its own.

An instructor runs one ``labkit serve`` for the room and hands out its address and a key per
learner. With those in the environment, every notebook uses that server:

    LABKIT_URL=http://10.0.0.5:8765 LABKIT_API_KEY=sk-room-ada LABKIT_NAME=Ada jupyter lab notebooks/

``LABKIT_URL`` is the server's root (``/v1`` is added); ``LABKIT_API_KEY`` is the key every
labkit client sends (rollouts, span fetches, the what-if lab's watchers), in a room or not;
``LABKIT_NAME`` (optional) is the name an instructor's dashboard shows beside the key's label
(``metadata.labkit_name`` on every request of labkit's agent). Without ``LABKIT_URL`` a notebook
starts a server of its own.

These are the only variables labkit reads. The official SDK's ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` are not: they are set for other programs too (often with a real key, which
must not reach a classroom server), and a notebook's SDK examples take the address and key from
the server it holds (``server.base_url``, ``server.api_key``). A notebook that finds
``OPENAI_BASE_URL`` but no ``LABKIT_URL`` says so in one line (``unread_variables``).

A ``RoomServer`` looks like a ``LabkitServer`` to a notebook (``base_url``, ``ws_url``,
``api_key``, ``close``) but owns nothing: closing it leaves the room's server running, and
what would reconfigure or restart a server cannot be done on a shared one (``shared`` says
which kind a notebook holds).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from labkit.api.owners import MAX_NAME_CHARS, name_problem

URL_ENV = "LABKIT_URL"
KEY_ENV = "LABKIT_API_KEY"
NAME_ENV = "LABKIT_NAME"
SDK_URL_ENV, SDK_KEY_ENV = "OPENAI_BASE_URL", "OPENAI_API_KEY"  # the official SDK's: not read here
DEFAULT_KEY = "sk-labkit-agent"  # what a client sends when nobody gave it a key
JOIN_TIMEOUT_S = 10.0


class RoomError(RuntimeError):
    """The room's server cannot be used as asked: one sentence, with what to do.

    In a notebook it shows as that sentence alone, not a traceback through labkit's code.
    """

    def _render_traceback_(self) -> list[str]:  # IPython's hook for an exception's own display
        return [f"{type(self).__name__}: {self}"]


def client_key() -> str:
    """The key labkit's clients send: ``$LABKIT_API_KEY``, else a fixed local one.

        client_key()        # 'sk-room-ada' in a room, 'sk-labkit-agent' elsewhere
    """
    return os.environ.get(KEY_ENV, "").strip() or DEFAULT_KEY


def learner_name(name: str | None = None) -> str | None:
    """The learner's name for the instructor's view: ``name``, else ``$LABKIT_NAME``, else None.
    A name that cannot be one (empty, over 64 characters, a control character) is a ``RoomError``.

        learner_name()      # 'Ada' with LABKIT_NAME=Ada, None without it
    """
    source = "the learner's name" if name is not None else NAME_ENV
    name = name if name is not None else os.environ.get(NAME_ENV, "").strip() or None
    if name is not None and (problem := name_problem(name)):
        rule = f"use 1 to {MAX_NAME_CHARS} printable characters"
        raise RoomError(f"{source} {name!r} cannot be used: {problem}; {rule}")
    return name


def unread_variables() -> str | None:
    """One line for a learner who set the official SDK's address but not labkit's, or a key
    without an address: what labkit reads, and what to set. None when there is nothing to say.
    ``OPENAI_API_KEY`` alone says nothing: it is usually a real key, for other programs.

    The address is repeated (without ``/v1``), never a key.
    """
    if room_url() is not None:
        return None
    sdk_url = os.environ.get(SDK_URL_ENV, "").strip().rstrip("/").removesuffix("/v1")
    if sdk_url:
        return (
            f"labkit: {SDK_URL_ENV} is set, but labkit reads {URL_ENV} and {KEY_ENV} (for a room at "
            f"{sdk_url}: {URL_ENV}={sdk_url} {KEY_ENV}=<your key>); starting a server of its own"
        )
    if os.environ.get(KEY_ENV, "").strip():
        return f"labkit: {KEY_ENV} is set but {URL_ENV} is not: no room to join; starting a server of its own"
    return None


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
