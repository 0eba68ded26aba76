"""Who a request is, as labkit names it on the wire: a key's owner, its label, a learner's name.

What a key creates is stored under the key's owner, a digest, so the database never holds a
key. An instructor's trace stream marks each learner's responses with a label of that owner,
a shorter digest, so a dashboard never shows a key either; an instructor who handed out the
keys can compute each one's label (``key_label``) to tell whose traffic a label is. A learner
may also name themselves (``$LABKIT_NAME``, sent as ``metadata.labkit_name``): the stream
carries the name beside the label.

    >>> key_label("sk-room-ada") == owner_label(owner_of_key("sk-room-ada"))
    True
    >>> key_label("sk-room-ada").startswith("learner-"), "sk-room-ada" in key_label("sk-room-ada")
    (True, False)
"""

from __future__ import annotations

import hashlib

NAME_KEY = "labkit_name"  # in ``metadata``: the learner's own name for the instructor's view
MAX_NAME_CHARS = 64


def owner_of_key(key: str) -> str:
    """The owner a key's responses, items, traces and billing are stored under."""
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def owner_label(owner: str) -> str:
    """A short, stable name for an owner's traffic that does not reveal the key.

    >>> owner_label("key_0123") == owner_label("key_0123") != owner_label("key_4567")
    True
    """
    return "learner-" + hashlib.sha256(owner.encode()).hexdigest()[:6]


def key_label(key: str) -> str:
    """The label an instructor's trace stream gives this key's responses."""
    return owner_label(owner_of_key(key))


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a learner's name, or None: it is 1 to 64 printable characters.

    >>> name_problem("Ada Lovelace") is None, name_problem(""), name_problem("Ada\\n")
    (True, 'it is empty', 'it has a control character')
    """
    if not name.strip():
        return "it is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name)} characters long"
    if not name.isprintable():
        return "it has a control character"
    return None
