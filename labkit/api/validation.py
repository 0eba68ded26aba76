"""A pydantic model's validation, its first error told in the API's words.

A wrong type or value is an ``APIError`` (400) naming the offending ``param`` in the API's
own path syntax, e.g. ``input[2].call_id``:

>>> from pydantic import BaseModel
>>> class Point(BaseModel):
...     x: int
>>> validate(Point, {"x": "one"}, "input[2]")
Traceback (most recent call last):
labkit.api.errors.APIError: Invalid type for 'input[2].x': expected an integer.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from labkit.api.errors import APIError, invalid_request

Model = TypeVar("Model", bound=BaseModel)

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


_UNION_MEMBERS = {"str", "int", "float", "bool", "dict", "list", "none"}


def param_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    """Pydantic's error location in the API's syntax: ``("input", 2, "role") -> 'input[2].role'``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or part[:1].isupper() or part in _UNION_MEMBERS:
            continue  # pydantic's name for a union member, not a field
        else:
            path += f".{part}" if path else part
    return path


def _to_api_error(exc: ValidationError, prefix: str = "") -> APIError:
    err = max(exc.errors(), key=lambda e: len(e["loc"]))  # the most specific branch
    param = param_path(tuple(err["loc"]), prefix) or None
    kind = err["type"]
    if kind == "missing":
        return invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
        )
    if kind in _TYPE_WORDS:
        return invalid_request(
            f"Invalid type for '{param}': expected {_TYPE_WORDS[kind]}.",
            param=param,
            code="invalid_type",
        )
    return invalid_request(f"Invalid value for '{param}': {err['msg']}.", param=param, code="invalid_value")


def validate(model: type[Model], raw: Any, prefix: str = "") -> Model:
    """``model`` validated from ``raw``; its error as an ``APIError``, ``prefix`` before its path."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _to_api_error(exc, prefix) from None
