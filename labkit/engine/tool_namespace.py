"""Function tools as the model reads them: a TypeScript-like namespace of signatures.

The chat template (``labkit.engine.render``) puts this text in the system block, after the
instructions; other tools (hosted, custom) follow it as JSON. Only the keywords of a tool's
parameters that ``labkit.api.tool_schema`` checks are read here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from labkit.api.items import Item


def _ts_type(schema: Any) -> str:
    """A TypeScript-like type for a JSON schema, e.g. ``{"type": "string"} -> 'string'``."""
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"]) or "never"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}) for k in kind)
    if kind == "object":
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        fields = [f"{name}{'' if name in required else '?'}: {_ts_type(sub)}" for name, sub in props.items()]
        return "{" + ", ".join(fields) + "}"
    if kind == "array":
        return f"{_ts_type(schema.get('items'))}[]"
    if kind == "integer":
        return "number"
    return kind if isinstance(kind, str) else "any"


def tool_namespace(tools: Sequence[Item]) -> str:
    """Function tools as a ``namespace functions`` of signatures; other tools as JSON.

    >>> print(tool_namespace([{"type": "function", "name": "ls", "description": "List files.",
    ...     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]))
    namespace functions {
    // List files.
    type ls = (_: {path?: string}) => any;
    } // namespace functions
    """
    lines = ["namespace functions {"]
    others = []
    for tool in tools:
        if tool.get("type") != "function":
            others.append(tool)
            continue
        if tool.get("description"):
            lines.extend(f"// {line}" for line in str(tool["description"]).splitlines())
        lines.append(f"type {tool.get('name')} = (_: {_ts_type(tool.get('parameters'))}) => any;")
    lines.append("} // namespace functions")
    lines.extend(json.dumps(tool, sort_keys=True) for tool in others)
    return "\n".join(lines)
