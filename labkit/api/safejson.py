"""JSON in and out of the server, bounded and strict: what a buggy client sends never crashes it.

Every request body and WebSocket frame goes through ``loads``:

- the text must be UTF-8 (raw bytes are decoded strictly);
- nesting deeper than ``MAX_DEPTH`` is refused *before* parsing, by a scan of the raw text
  (deep values would otherwise exhaust the recursion of the parser, or of every later
  step that copies or renders them);
- ``NaN``, ``Infinity`` and numbers that overflow a float are refused (they are not JSON,
  and a stored response holding one could never be sent back);
- an integer with more digits than Python converts (about 4,300) is refused;
- a string (or key) holding a lone surrogate (``"\\ud800"``) is refused, naming its path.

Each refusal is a 400 ``APIError``. ``dumps`` is the safety net on the way out: never
``NaN``, never a lone surrogate.

    >>> loads('{"input": "hi", "n": 1.5}')
    {'input': 'hi', 'n': 1.5}
    >>> loads('{"temperature": NaN}')
    Traceback (most recent call last):
    labkit.api.errors.APIError: We could not parse the JSON body of your request: NaN is not a JSON number.
    >>> loads('{"input": [{"content": "\\\\ud800"}]}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    labkit.api.errors.APIError: Invalid value for 'input[0].content': the string is not valid Unicode ...
    >>> nesting_depth('[{"a": "[[[["}, [1]]')
    2
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import re
from typing import Any

from labkit.api.errors import invalid_request

# Real requests nest a few levels (body, items, content parts) plus a tool schema's own
# levels; 64 leaves room for deep schemas and stays far below any recursion limit.
MAX_DEPTH = 64

_ESCAPE = re.compile(r"\\.", re.DOTALL)  # a backslash and the character it escapes
_STRING = re.compile(r'"[^"]*"')  # with escapes gone, a string is quote to quote (linear)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEPS = str.maketrans({"[": "\x02", "{": "\x02", "]": "\x00", "}": "\x00"})
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class _Refused(ValueError):
    """Raised from inside ``json.loads`` hooks: the message for the client."""


def nesting_depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text, found without parsing it.

    Linear, in C-speed passes: escapes and strings are cut out, then only brackets are
    kept, and the running depth is accumulated (an opening bracket counts 2, a closing
    one 0, so the depth after bracket ``i`` is the running sum minus ``i + 1``). Text that
    is not JSON gets some number; the parser refuses it afterwards anyway.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    if not brackets:
        return 0
    steps = brackets.translate(_BRACKET_STEPS).encode("ascii")
    return max(map(operator.sub, itertools.accumulate(steps), itertools.count(1)))


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: valid JSON syntax, but no float can hold it
        raise _Refused(f"the number {text[:32]} is too large")
    return value


def safe_text(text: str) -> str:
    """``text`` with any lone surrogate replaced by U+FFFD, so it can always be encoded."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{safe_text(key)}" if path else safe_text(key)


def find_lone_surrogate(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) in ``value`` holding a lone surrogate, if any.

    >>> find_lone_surrogate({"metadata": {"k": "ok"}, "input": ["a", "b\\ud800"]})
    'input[1]'
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, str):
            if _LONE_SURROGATE.search(node):
                return where or "body"
        elif isinstance(node, dict):
            children = []
            for key, child in node.items():
                if _LONE_SURROGATE.search(key):
                    return _join(where, key)
                children.append((_join(where, key), child))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(node))))
    return None


def check_unicode(value: Any, path: str = "") -> None:
    """Refuse a value holding a string that is not valid Unicode, naming where it is."""
    where = find_lone_surrogate(value, path)
    if where is not None:
        raise invalid_request(
            f"Invalid value for '{where}': the string is not valid Unicode (a lone surrogate).",
            param=where,
            code="invalid_value",
        )


def loads(
    raw: bytes | str, *, what: str = "the JSON body of your request", max_depth: int = MAX_DEPTH
) -> Any:
    """Parse a request body or frame, refusing what the server cannot safely hold (a 400)."""
    if isinstance(raw, bytes | bytearray):
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise invalid_request(
                f"We could not parse {what}: it is not valid UTF-8 (at byte {exc.start})."
            ) from None
    else:
        text = raw
    depth = nesting_depth(text)
    if depth > max_depth:
        raise invalid_request(
            f"We could not parse {what}: it nests {depth} levels deep, more than the {max_depth} allowed."
        )
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise invalid_request(f"We could not parse {what}: {exc}.") from None
    except _Refused as exc:
        raise invalid_request(f"We could not parse {what}: {exc}.") from None
    except ValueError:  # an integer with more digits than Python converts
        raise invalid_request(f"We could not parse {what}: a number in it has too many digits.") from None
    except RecursionError:  # not reached after the depth check; kept as a guard
        raise invalid_request(f"We could not parse {what}: it nests too deeply.") from None
    # Only an escape can carry one in from bytes (valid UTF-8 cannot); a str may hold one raw.
    if _SURROGATE_ESCAPE.search(text) or _LONE_SURROGATE.search(text):
        check_unicode(value)
    return value


# One encoder for every event (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: Any) -> str:
    """Compact JSON for the wire: never ``NaN`` (a ``ValueError``), never a lone surrogate.

    >>> dumps({"delta": "café", "n": 1})
    '{"delta":"café","n":1}'
    """
    text = _ENCODER.encode(value)
    return text if text.isascii() else safe_text(text)  # ASCII holds no surrogate (an O(1) check)
