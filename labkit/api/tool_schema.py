"""What a function tool's ``parameters`` must hold where labkit reads it, checked at every level.

labkit reads a few JSON Schema keywords of a tool's parameters: to render the tool for the
model (``labkit.engine.tool_namespace``) and to build example arguments (``labkit.engine.arguments``).
``RULES`` says what each must hold; every other keyword is kept and never read. A wrong value
is a 400 ``invalid_function_parameters`` naming the keyword's path:

>>> check_schema({"type": "object", "properties": {"tags": {"type": "array", "minItems": -1}}},
...     "tools[0].parameters", "tag")  # doctest: +ELLIPSIS
Traceback (most recent call last):
labkit.api.errors.APIError: Invalid schema ... 'tools[0].parameters.properties.tags.minItems' must be ...

The rules allow what JSON Schema's drafts 4 to 2020-12 allow for these keywords (draft 4's
boolean ``exclusiveMinimum``, draft 7's array of ``items``), and ask one thing more: a number
must fit a float. A test holds them to jsonschema's meta-schemas; the check itself is a loop
over the schema's nodes, because jsonschema's 2020-12 meta-schema costs tens of times more a
request, and importing it, seconds where Jupyter is installed (``benchmarks/tool_schemas.py``).
The work is one visit per node, with no recursion, and no ``pattern`` or ``$ref`` is followed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from labkit.api.errors import invalid_request

# Keywords whose value holds schemas: a map of names to schemas, a list of them, or one.
SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
ONE_SCHEMA = ("not", "additionalProperties", "additionalItems", "contains", "propertyNames")
COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
BOUNDS = ("minimum", "maximum", "multipleOf")
EXCLUSIVE_BOUNDS = ("exclusiveMinimum", "exclusiveMaximum")  # a number, or draft 4's boolean
JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


def is_finite_number(value: Any) -> bool:
    """A JSON number a float can hold: not a boolean, not NaN or infinite, not past 1.8e308.

    >>> is_finite_number(1e30), is_finite_number(10**400), is_finite_number(True)
    (True, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict | bool)  # true and false are schemas too


def _is_type(value: Any) -> bool:
    if value is None:  # read as no type at all
        return True
    kinds = value if isinstance(value, list) else [value]
    return bool(kinds) and all(isinstance(k, str) and k in JSON_TYPES for k in kinds)


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(k, str) for k in value)


def _is_count(value: Any) -> bool:
    return is_finite_number(value) and value >= 0 and float(value).is_integer()


def _is_bound_or_flag(value: Any) -> bool:
    return is_finite_number(value) or isinstance(value, bool)


def _is_schema_map(value: Any) -> bool:
    return isinstance(value, dict) and all(map(_is_schema, value.values()))


def _is_schema_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(map(_is_schema, value))


def _is_items(value: Any) -> bool:
    return _is_schema(value) or (isinstance(value, list) and all(map(_is_schema, value)))


# What each keyword labkit reads must hold (words for the error, and the test), in the order
# they are checked; a node's own keywords are checked before the schemas inside it.
Rule = tuple[str, Callable[[Any], bool]]
RULES: dict[str, Rule] = {
    "type": ("a JSON type name or a non-empty array of them", _is_type),
    "required": ("an array of strings", _is_names),
    "enum": ("an array", lambda value: isinstance(value, list)),
    **{key: ("a non-negative integer", _is_count) for key in COUNTS},
    **{key: ("a finite number", is_finite_number) for key in BOUNDS},
    **{key: ("a finite number", _is_bound_or_flag) for key in EXCLUSIVE_BOUNDS},
    **{key: ("an object of schemas", _is_schema_map) for key in SCHEMA_MAPS},
    **{key: ("a non-empty array of schemas", _is_schema_list) for key in SCHEMA_LISTS},
    **{key: ("a schema", _is_schema) for key in ONE_SCHEMA},
    "items": ("a schema or an array of schemas", _is_items),
}


def _problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """The first keyword of one schema node (not its children) that holds the wrong kind of value."""
    for key, (wanted, holds) in RULES.items():
        if key in schema and not holds(schema[key]):
            return key, wanted
    return None


def _subschemas(schema: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """The schemas inside one node, each with its path, in the order they are checked."""
    for key in SCHEMA_MAPS:
        for name, sub in (schema.get(key) or {}).items():
            yield f"{path}.{key}.{name}", sub
    for key in SCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key) or []):
            yield f"{path}.{key}[{i}]", sub
    for key in ONE_SCHEMA:
        if key in schema:
            yield f"{path}.{key}", schema[key]
    items = schema.get("items")
    if isinstance(items, list):
        for i, sub in enumerate(items):
            yield f"{path}.items[{i}]", sub
    elif items is not None:
        yield f"{path}.items", items


def check_schema(schema: dict[str, Any], param: str, name: str) -> None:
    """Refuse a function's ``parameters`` whose keywords labkit reads hold the wrong kind of value.

    ``param`` is where the schema sits in the request (``tools[0].parameters``), ``name`` the
    function's; the 400 names the keyword's path under ``param``.

    >>> check_schema({"type": "object", "required": ["path"], "x-anything": 3}, "tools[0].parameters", "f")
    """
    stack: list[tuple[str, Any]] = [(param, schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, bool):
            continue
        problem = _problem(node) if isinstance(node, dict) else ("", "a schema (an object or a boolean)")
        if problem is not None:
            key, wanted = problem
            where = f"{path}.{key}" if key else path
            raise invalid_request(
                f"Invalid schema for function '{name}': '{where}' must be {wanted}.",
                param=where,
                code="invalid_function_parameters",
            )
        stack.extend(reversed(list(_subschemas(node, path))))
