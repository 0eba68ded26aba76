"""What checking a tool's parameters costs: labkit's check beside jsonschema's meta-schemas.

Every create request is validated, its function tools' parameters included, so this cost is
paid on every turn of every design. The script times, side by side in one run, labkit's
``check_schema`` and jsonschema checking the same schemas against the 2020-12 and the draft 7
meta-schemas, on the agent's five tools and on one schema near the 2 MiB body limit; then the
time a fresh interpreter takes to import each (jsonschema loads its format checkers, which
parse grammars at import where Jupyter installed them). Needs jsonschema (the test extra).

    python benchmarks/tool_schemas.py
    python benchmarks/tool_schemas.py --repeat 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from labkit.api.tool_schema import check_schema
from labkit.client.tools import TOOL_SPECS

Check = Callable[[dict[str, Any]], None]


def labkit_check(schema: dict[str, Any]) -> None:
    check_schema(schema, "tools[0].parameters", "f")


def meta_schema_check(draft: type[jsonschema.protocols.Validator]) -> Check:
    validator = draft(draft.META_SCHEMA)

    def check(schema: dict[str, Any]) -> None:
        if next(validator.iter_errors(schema), None) is not None:
            raise ValueError("refused")

    return check


def large_schema(limit_bytes: int) -> dict[str, Any]:
    """An object schema of string properties, its JSON just under ``limit_bytes``."""
    one = {"type": "string", "description": "x" * 40, "minLength": 1}
    count = limit_bytes // (len(json.dumps(one)) + 12)
    return {"type": "object", "properties": {f"p{i}": dict(one) for i in range(count)}}


def median_s(check: Check, schemas: list[dict[str, Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for schema in schemas:
            check(schema)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def import_s(module: str, repeat: int) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(repeat)]
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per check (median)")
    args = parser.parse_args()
    checks = {
        "labkit": labkit_check,
        "jsonschema 2020-12": meta_schema_check(jsonschema.Draft202012Validator),
        "jsonschema draft 7": meta_schema_check(jsonschema.Draft7Validator),
    }
    cases = {
        "the agent's 5 tools": ([spec["parameters"] for spec in TOOL_SPECS], args.repeat),
        "one 2 MiB schema": ([large_schema(2 * 1024 * 1024)], 1),
    }
    for case, (schemas, repeat) in cases.items():
        took = {name: median_s(check, schemas, repeat) for name, check in checks.items()}
        size = sum(len(json.dumps(schema)) for schema in schemas)
        print(f"{case} ({size:,} bytes of JSON):")
        for name, seconds in took.items():
            print(f"  {name:<24} {seconds * 1000:10.2f} ms  {seconds / took['labkit']:6.1f}x labkit")
    took = {module: import_s(module, 3) for module in ("labkit.api.tool_schema", "jsonschema")}
    base = took["labkit.api.tool_schema"]
    print("import in a fresh interpreter:")
    for module, seconds in took.items():
        print(f"  {module:<24} {seconds * 1000:10.0f} ms  {seconds / base:6.1f}x labkit")


if __name__ == "__main__":
    main()
