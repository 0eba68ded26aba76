"""API keys. On loopback any bearer key is accepted by default; a key list makes keys required.

Stored responses belong to the key that created them: the owner is a digest
of the key, so another key (or no key) cannot read, chain from or delete them.

    >>> Keys().owner("Bearer sk-a") == Keys().owner("Bearer sk-a") != Keys().owner("Bearer sk-b")
    True
"""

from __future__ import annotations

import hashlib
import hmac
import os

from labkit.api.errors import authentication_error

KEYS_ENV = "LABKIT_API_KEYS"
ANONYMOUS = "anonymous"


def keys_from_env() -> list[str]:
    """``LABKIT_API_KEYS=key1,key2``: the keys a server requires, if any."""
    return [k.strip() for k in os.environ.get(KEYS_ENV, "").split(",") if k.strip()]


class Keys:
    def __init__(self, required: list[str] | None = None) -> None:
        self.required = list(required or [])

    def owner(self, authorization: str | None) -> str:
        """The owner id for an ``Authorization`` header; raises a 401 ``APIError`` if refused."""
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip() if scheme.lower() == "bearer" else ""
        if self.required:
            if not key:
                raise authentication_error(
                    "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
                )
            if not any(hmac.compare_digest(key, k) for k in self.required):
                raise authentication_error("Incorrect API key provided.")
        if not key:
            return ANONYMOUS
        return "key_" + hashlib.sha256(key.encode()).hexdigest()[:32]
