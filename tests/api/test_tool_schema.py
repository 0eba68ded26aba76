"""The check of a function tool's parameters, held to jsonschema's meta-schemas (the oracle).

Two directions, on generated schemas of the keywords labkit reads:

- what JSON Schema 2020-12 accepts, labkit accepts (it never refuses a valid schema);
- what labkit refuses, some draft (4, 7 or 2020-12) refuses too, at the keyword labkit names.

labkit asks one thing more than the drafts (a number must fit a float), and its check walks
the schema without recursion.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.api.errors import APIError
from labkit.api.tool_schema import JSON_TYPES, RULES, check_schema
from labkit.engine.arguments import example_value

pytestmark = pytest.mark.slow  # property searches

PARAM = "tools[0].parameters"
DRAFTS = (jsonschema.Draft202012Validator, jsonschema.Draft7Validator, jsonschema.Draft4Validator)

names = st.text(alphabet="abcXY_", min_size=1, max_size=3)  # no "." or "[": paths split back cleanly
numbers = (
    st.integers(-3, 10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 2.0, 2.5, -1, 1e30])
)
values = (
    st.none()
    | st.booleans()
    | numbers
    | st.sampled_from(sorted(JSON_TYPES))
    | names
    | st.lists(st.sampled_from([*sorted(JSON_TYPES), "a", 1, None]), max_size=3)
    | st.just({})
)


def schemas(keywords: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Schemas of ``keywords`` (and two labkit does not read), nested, their values right or wrong."""
    keys = st.sampled_from([*keywords, "description", "x-other"])
    return st.recursive(
        st.dictionaries(keys, values, max_size=4),
        lambda inner: st.dictionaries(
            keys,
            inner
            | values
            | st.lists(inner | values, max_size=3)
            | st.dictionaries(names, inner | values, max_size=3),
            max_size=4,
        ),
        max_leaves=16,
    )


def refusal(schema: dict[str, Any]) -> APIError | None:
    try:
        check_schema(schema, PARAM, "f")
    except APIError as err:
        return err
    return None


def segments(param: str) -> list[str | int]:
    """``'tools[0].parameters.anyOf[1].type'`` -> ``['anyOf', 1, 'type']``."""
    rest = param.removeprefix(PARAM)
    return [int(i) if i else name for name, i in re.findall(r"\.([^.\[]+)|\[(\d+)\]", rest)]


# ---------------------------------------------------------------- the oracle


# additionalItems is draft 7's (2020-12 does not know it); the second test covers it.
@settings(max_examples=400, deadline=None, database=None)
@given(schema=schemas(sorted(set(RULES) - {"additionalItems"})))
def test_what_json_schema_2020_12_accepts_labkit_accepts(schema: dict[str, Any]) -> None:
    if jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).is_valid(schema):
        assert refusal(schema) is None, schema


@settings(max_examples=400, deadline=None, database=None)
@given(schema=schemas(sorted(RULES)))
def test_what_labkit_refuses_a_draft_refuses_at_the_same_keyword(schema: dict[str, Any]) -> None:
    err = refusal(schema)
    if err is None:
        return
    assert err.status == 400 and err.code == "invalid_function_parameters"
    assert err.param is not None and err.message.endswith(".")
    *where, keyword = segments(err.param)
    node: Any = schema
    for step in where:
        node = node[step]
    # The node that holds the keyword, on its own: a draft finds an error at or under it.
    found = [
        list(error.absolute_path) for draft in DRAFTS for error in draft(draft.META_SCHEMA).iter_errors(node)
    ]
    assert any(path[:1] == [keyword] for path in found), (err.param, found)


# ---------------------------------------------------------------- one thing more, and bounds


@pytest.mark.parametrize("number", [10**400, -(10**400), float("nan"), float("inf")])
@pytest.mark.parametrize("keyword", ["minimum", "exclusiveMaximum", "minItems"])
def test_a_number_a_float_cannot_hold_is_refused(number: float, keyword: str) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "number", keyword: number}}}
    err = refusal(schema)
    assert err is not None and err.param == f"{PARAM}.properties.n.{keyword}"
    assert example_value(schema) == {"n": 0}  # the policy, given it anyway, does not fail


def test_deep_nesting_is_walked_without_recursion() -> None:
    deep: dict[str, Any] = {"type": "string", "minLength": -1}
    for _ in range(20_000):
        deep = {"type": "object", "properties": {"a": deep}}
    err = refusal(deep)
    assert err is not None and err.param.endswith(".properties.a.minLength")
    assert err.param.count(".properties.a") == 20_000
