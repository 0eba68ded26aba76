"""The notebooks' diagrams are pictures drawn from the Mermaid source in their own cell, so they
show offline everywhere (an HTML export fetches Mermaid from a CDN for a ``mermaid`` fence), and
a source edited without drawing it again is caught here, without node or a browser."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_script("tools/render_diagrams.py")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The notebooks and their drawings, to spoil."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    return tmp_path / "notebooks"


def test_every_diagram_is_drawn_from_the_source_in_its_cell(tool: ModuleType) -> None:
    assert tool.problems() == []
    diagrams = [
        d for p in sorted(tool.NOTEBOOKS.glob("*.ipynb")) for d in tool.diagrams_in(p, tool.read_notebook(p))
    ]
    assert {d.notebook.name[:2] for d in diagrams} == {"01", "03", "04"}
    for diagram in diagrams:
        assert diagram.source.startswith("sequenceDiagram\n")
        svg = (tool.DIAGRAMS / f"{diagram.name}.svg").read_text(encoding="utf-8")
        assert "<foreignObject" not in svg and "<svg" in svg  # text as SVG text: drawn without HTML


def test_a_source_edited_without_drawing_it_again_is_found(tool: ModuleType, copy: Path) -> None:
    path = copy / "04_appended_rollout_prototype.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    [diagram] = [d for d in tool.diagrams_in(path, notebook) if d.name == "04-appended-rollout"]
    cell = notebook["cells"][diagram.cell]
    cell["source"] = [line.replace("runs the tool", "runs a tool") for line in cell["source"]]
    tool.write_notebook(path, notebook)
    found = tool.problems(copy, copy / "diagrams")
    where = f"{path.name} cell {diagram.cell} (04-appended-rollout)"
    assert found == [
        f"{where}: 04-appended-rollout.svg was drawn from another source",
        f"{where}: the attachment was drawn from another source",
    ]


def test_a_mermaid_fence_a_missing_picture_and_a_stray_drawing_are_found(
    tool: ModuleType, copy: Path
) -> None:
    path = copy / "03_persistent_socket_cache.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    [diagram] = tool.diagrams_in(path, notebook)
    del notebook["cells"][diagram.cell]["attachments"]
    notebook["cells"].append(
        {"cell_type": "markdown", "id": "x", "metadata": {}, "source": "```mermaid\nA\n```"}
    )
    tool.write_notebook(path, notebook)
    (copy / "diagrams" / "old.svg").write_text("<svg/>")
    found = tool.problems(copy, copy / "diagrams")
    assert f"{path.name} cell {len(notebook['cells']) - 1}: a mermaid fence" in found[0]
    assert f"{path.name} cell {diagram.cell} (03-socket-cache): no attachment 03-socket-cache.png" in found
    assert "old.svg: no notebook draws it" in found


def test_the_picture_carries_the_hash_of_its_source(tool: ModuleType) -> None:
    path = ROOT / "notebooks" / "01_naive_stateless_loop.ipynb"
    notebook = tool.read_notebook(path)
    [diagram] = tool.diagrams_in(path, notebook)
    png = base64.b64decode(notebook["cells"][diagram.cell]["attachments"][f"{diagram.name}.png"]["image/png"])
    assert png.startswith(tool.PNG_SIGNATURE)
    assert tool.png_texts(png) == {tool.HASH_KEY: tool.source_sha256(diagram.source)}
    assert tool.png_texts(tool.png_with_text(png, "k", "v"))["k"] == "v"
