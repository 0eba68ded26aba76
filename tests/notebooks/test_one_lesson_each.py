"""Notebooks 03 and 04 keep one lesson each (the socket and its cache; the prototype): the API's
edges from OpenAI's WebSocket mode documentation, and the SDK's ``response.inject`` beta that was
04's last chapter, live in the extra notebook 10, whole and self-contained.

Reads the notebooks' structure only (no kernel): the edges' cells moved with their ids, 03 points
to where they went, and every name a cell of 10 reads is defined in 10 before it (a notebook that
leaned on 03's variables would fail under Run All).
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
EDGES = [
    "c14a",
    "c14b",
    "n241",
    "n251",
    "n261",
    "n271",
    "n281",
    "n291",
    "c14c",
    "c14d",
    "c14e",
    "c14f",
    "c14g",
]
BETA = ["c18a", "c18b", "c18c", "c18d", "c18e", "c18f", "c18g", "c18h", "c18i"]  # 04's last chapter
# What only the edges do: a short-lived server, compaction, a warm-up.
EDGE_CALLS = ("--ws-lifetime", "responses.compact(", "generate=False")


def cells(number: str) -> list[dict]:
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_apis_edges_moved_from_03_to_10_with_their_cell_ids() -> None:
    ids_03, ids_10 = [c["id"] for c in cells("03")], [c["id"] for c in cells("10")]
    assert not set(EDGES) & set(ids_03), "03 still holds cells of the API's edges"
    assert [i for i in ids_10 if i in EDGES] == EDGES, "10 holds the edges' cells, in their order"
    code_03 = "\n".join(source(c) for c in cells("03") if c["cell_type"] == "code")
    assert not [call for call in EDGE_CALLS if call in code_03], "03's code still runs the API's edges"
    assert "10_websocket_mode_in_practice" in "\n".join(source(c) for c in cells("03")), "03 points to 10"


def test_the_beta_chapter_moved_from_04_to_10_with_its_cell_ids() -> None:
    ids_04, ids_10 = [c["id"] for c in cells("04")], [c["id"] for c in cells("10")]
    assert not set(BETA) & set(ids_04), "04 still holds cells of the beta chapter"
    assert [i for i in ids_10 if i in BETA] == BETA, "10 holds the beta chapter's cells, in their order"
    code_04 = "\n".join(source(c) for c in cells("04") if c["cell_type"] == "code")
    assert "beta.responses.connect" not in code_04, "04's code still drives the beta by hand"
    assert "10_websocket_mode_in_practice" in "\n".join(source(c) for c in cells("04")), "04 points to 10"


def test_every_name_a_cell_of_10_reads_is_defined_in_10_before_it() -> None:
    defined = set(dir(builtins))
    for cell in cells("10"):
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse(source(cell))
        assigned = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }
        assigned |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assigned |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
        imported = {
            (alias.asname or alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        read = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
        }
        missing = read - defined - assigned - imported
        assert not missing, f"10 {cell['id']} reads {sorted(missing)}, defined nowhere before it in 10"
        defined |= assigned | imported
