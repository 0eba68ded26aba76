"""Example arguments for a function tool: a value its parameters' schema accepts, kept small.

The generic policy (``labkit.engine.policies``) calls a client's tools with these:

>>> example_value({"type": "object", "properties": {"tags": {"type": "array", "minItems": 1e30}}})
{'tags': ['tags', 'tags', 'tags', 'tags', 'tags', 'tags', 'tags', 'tags']}
"""

from __future__ import annotations

import math
from typing import Any

from labkit.api.tool_schema import is_finite_number

# Bounds on example arguments, whatever numbers a schema holds: a client's minItems of 1e30
# or minLength of a billion must not make the server build (or the model sample) more.
MAX_EXAMPLE_ITEMS = 8  # elements of one array
MAX_EXAMPLE_CHARS = 256  # characters of one string
MAX_EXAMPLE_DEPTH = 16  # nesting of the value
MAX_EXAMPLE_NODES = 2_000  # values in all


def example_value(schema: Any, name: str = "value") -> Any:
    """A value valid under a JSON schema, deterministic, and small whatever the schema says.

    Sizes are clamped (``MAX_EXAMPLE_*``): past them the value may not meet the schema,
    but it is built in bounded time. A malformed schema gives some value, never an error.

    >>> example_value({"type": "object", "properties": {"path": {"type": "string"},
    ...     "n": {"type": "integer", "minimum": 3}}, "required": ["path"]})
    {'path': 'path', 'n': 3}
    >>> len(example_value({"type": "array", "minItems": 1e30, "items": {"type": "string"}}))
    8
    """
    return _Example().value(schema, name, 0)


def _count(value: Any, default: int, cap: int) -> int:
    """A schema's count keyword as a whole number in ``0..cap`` (``default`` if it is not one)."""
    if not is_finite_number(value):
        return min(default, cap)
    return max(0, min(int(min(value, cap)), cap))


class _Example:
    """One ``example_value`` call: a budget of values, so no schema costs more than a few."""

    def __init__(self) -> None:
        self.nodes = MAX_EXAMPLE_NODES

    def value(self, schema: Any, name: str, depth: int) -> Any:
        self.nodes -= 1
        if not isinstance(schema, dict):
            return name
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        spent = depth >= MAX_EXAMPLE_DEPTH or self.nodes <= 0
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options and not spent:
                return self.value(options[0], name, depth + 1)
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts and not spent:
            merged: dict[str, Any] = {}
            for sub in parts:
                if isinstance(sub, dict):
                    merged.update(sub)
            return self.value(merged, name, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and "properties" in schema):
            props = schema.get("properties")
            out: dict[str, Any] = {}
            for key, sub in (props if isinstance(props, dict) and not spent else {}).items():
                if self.nodes <= 0:
                    break
                out[key] = self.value(sub, key, depth + 1)
            return out
        if kind == "array":
            count = 0 if spent else max(1, _count(schema.get("minItems"), 1, MAX_EXAMPLE_ITEMS))
            out_items = []
            for _ in range(count):
                if self.nodes <= 0:
                    break
                out_items.append(self.value(schema.get("items", {}), name, depth + 1))
            return out_items
        if kind in ("integer", "number"):
            return _example_number(schema, integer=kind == "integer")
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return _example_string(schema, name)


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    """A bound and whether it is open: draft 2020's number form, or draft 4's boolean flag."""

    def number(value: Any) -> float | None:
        return value if is_finite_number(value) else None

    flag = schema.get(exclusive)
    if isinstance(flag, bool):
        return number(schema.get(inclusive)), flag
    if number(flag) is not None:
        return number(flag), True
    return number(schema.get(inclusive)), False


def _example_number(schema: dict[str, Any], *, integer: bool) -> int | float:
    """0 if the bounds allow it, else the whole number nearest a bound, else a real in between.

    >>> _example_number({"minimum": 2.5}, integer=True), _example_number({"maximum": -1}, integer=False)
    (3, -1)
    """
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum")

    def fits(v: float) -> bool:
        above = low is None or v > low or (v == low and not low_open)
        below = high is None or v < high or (v == high and not high_open)
        return above and below

    whole = [0]
    if low is not None:
        whole.append(math.floor(low) + 1 if low_open else math.ceil(low))
    if high is not None:
        whole.append(math.ceil(high) - 1 if high_open else math.floor(high))
    for value in whole:
        if fits(value):
            # Whole numbers go out as JSON integers: clients often read "number" fields as ints.
            return int(value)
    if integer or low is None or high is None:
        return whole[-1]  # no integer in range: the schema cannot be met, say the nearest
    return (low + high) / 2


def _example_string(schema: dict[str, Any], name: str) -> str:
    """The field's name (or "x"), repeated or cut to fit minLength and maxLength (at most 256)."""
    text = name or "x"
    min_len = _count(schema.get("minLength"), 0, MAX_EXAMPLE_CHARS)
    max_len = _count(schema.get("maxLength"), max(min_len, len(text)), MAX_EXAMPLE_CHARS)
    length = min(max(len(text), min_len), max_len)
    return (text * (length // len(text) + 1))[:length]
