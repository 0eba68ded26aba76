"""The notebooks' diagrams, drawn once from their Mermaid source into pictures that show offline.

A diagram lives in a Markdown cell as a picture, then its Mermaid source as plain text::

    ![Sequence diagram: the client ...](attachment:01-stateless-loop.png)

    <details><summary>The diagram as text (Mermaid)</summary>

    ```text
    sequenceDiagram
        participant C as Client
        ...
    ```

    </details>

The source in the cell is the one to edit. This tool draws it with Mermaid in the system's
Chromium (offline: ``tools/diagrams/render.mjs``) and writes two forms, each carrying the
source's SHA-256 so that a stale one is found without a browser:

- ``notebooks/diagrams/NAME.svg``: the vector drawing (text as SVG text, no HTML), for readers
  of the repository;
- the cell's attachment ``NAME.png``: the same drawing at twice its size, which JupyterLab,
  Notebook 7 and VS Code show and an HTML export inlines (JupyterLab draws no SVG attachment).

No ``mermaid`` fence is left in a notebook: an HTML export would fetch Mermaid from a CDN for it.

    npm ci --prefix tools/diagrams           # once: Mermaid and a browser driver (no browser)
    python tools/render_diagrams.py          # draw the diagrams whose source changed
    python tools/render_diagrams.py --check  # only say what is stale (no node, no browser)

The check runs in the tests (tests/notebooks/test_diagrams.py). Exit status 1 when ``--check`` finds
something stale.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DIAGRAMS = NOTEBOOKS / "diagrams"
RENDERER = ROOT / "tools" / "diagrams"

# The picture, then (after an optional <details> line) the plain-text fence with its source.
DIAGRAM = re.compile(
    r"!\[(?P<alt>[^\]]*)\]\(attachment:(?P<name>[a-z0-9][a-z0-9-]*)\.png\)\s*"
    r"(?:<details><summary>[^<\n]*</summary>\s*)?"
    r"```text\n(?P<source>.*?)```",
    re.S,
)
MERMAID_FENCE = re.compile(r"^\s*```+\s*mermaid", re.M)
PNG_MIME = "image/png"
HASH_KEY = "mermaid-source-sha256"  # a PNG text chunk's key; an SVG comment's words
SVG_MARK = re.compile(rf"<!-- {HASH_KEY} ([0-9a-f]{{64}}) -->")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Diagram:
    notebook: Path
    cell: int  # the cell's position in the notebook
    name: str  # the attachment is NAME.png, the drawing notebooks/diagrams/NAME.svg
    source: str

    @property
    def sha256(self) -> str:
        return source_sha256(self.source)

    @property
    def where(self) -> str:
        return f"{self.notebook.name} cell {self.cell} ({self.name})"


def source_sha256(source: str) -> str:
    """
    >>> source_sha256("sequenceDiagram\\n")[:12]
    '5da24f8a276e'
    """
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def cell_text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def diagrams_in(path: Path, notebook: dict) -> list[Diagram]:
    return [
        Diagram(path, index, match["name"], match["source"])
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "markdown"
        for match in DIAGRAM.finditer(cell_text(cell))
    ]


# ---------------------------------------------------------------- the hash in each form


def svg_with_hash(svg: str, sha256: str) -> str:
    return f"<!-- {HASH_KEY} {sha256} -->\n{SVG_MARK.sub('', svg).lstrip()}"


def svg_hash(svg: str) -> str | None:
    match = SVG_MARK.search(svg)
    return match[1] if match else None


def png_with_text(png: bytes, key: str, value: str) -> bytes:
    """The PNG with a tEXt chunk ``key: value`` right after its header chunk (IHDR).

    >>> png_texts(png_with_text(PNG_SIGNATURE + _chunk(b"IHDR", bytes(13)), "k", "v"))
    {'k': 'v'}
    """
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    header_end = len(PNG_SIGNATURE) + 8 + 13 + 4  # length, type, 13 bytes of IHDR, CRC
    text = _chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    return png[:header_end] + text + png[header_end:]


def png_texts(png: bytes) -> dict[str, str]:
    """The PNG's tEXt chunks, key to value."""
    if not png.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    texts, at = {}, len(PNG_SIGNATURE)
    while at + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        if kind == b"tEXt":
            key, _, value = png[at + 8 : at + 8 + length].partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return texts


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


# ---------------------------------------------------------------- what is stale


def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def write_notebook(path: Path, notebook: dict) -> None:
    # nbformat's own layout (what JupyterLab saves), so a diff shows only what changed
    path.write_text(
        json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8"
    )


def problems(notebooks: Path = NOTEBOOKS, drawings: Path = DIAGRAMS) -> list[str]:
    """What is stale or missing, in words; empty when every picture is its cell's source."""
    found: list[str] = []
    names: set[str] = set()
    for path in sorted(notebooks.glob("*.ipynb")):
        notebook = read_notebook(path)
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "markdown" and MERMAID_FENCE.search(cell_text(cell)):
                found.append(
                    f"{path.name} cell {index}: a mermaid fence (an HTML export fetches Mermaid for it)"
                )
        for diagram in diagrams_in(path, notebook):
            if diagram.name in names:
                found.append(f"{diagram.where}: the name is used twice")
            names.add(diagram.name)
            found += _stale(diagram, notebook["cells"][diagram.cell], drawings)
    if drawings.is_dir():
        found += [
            f"{svg.name}: no notebook draws it"
            for svg in sorted(drawings.glob("*.svg"))
            if svg.stem not in names
        ]
    return found


def _stale(diagram: Diagram, cell: dict, drawings: Path) -> list[str]:
    found = []
    svg = drawings / f"{diagram.name}.svg"
    if not svg.is_file():
        found.append(f"{diagram.where}: no {svg.name}")
    elif svg_hash(svg.read_text(encoding="utf-8")) != diagram.sha256:
        found.append(f"{diagram.where}: {svg.name} was drawn from another source")
    attachment = cell.get("attachments", {}).get(f"{diagram.name}.png", {}).get(PNG_MIME)
    if attachment is None:
        found.append(f"{diagram.where}: no attachment {diagram.name}.png")
    elif png_texts(base64.b64decode(attachment)).get(HASH_KEY) != diagram.sha256:
        found.append(f"{diagram.where}: the attachment was drawn from another source")
    return found


# ---------------------------------------------------------------- drawing


def render(diagrams: list[Diagram], drawings: Path = DIAGRAMS) -> None:
    """Draw the diagrams (node and Chromium) and write each one's SVG file and PNG attachment."""
    node = shutil.which("node")
    if node is None or not (RENDERER / "node_modules" / "mermaid").is_dir():
        raise SystemExit(
            "render_diagrams: needs node and the renderer's packages: npm ci --prefix tools/diagrams"
        )
    wanted = [{"name": d.name, "source": d.source} for d in diagrams]
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [node, str(RENDERER / "render.mjs"), out],
            input=json.dumps(wanted),
            text=True,
            capture_output=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"render_diagrams: drawing failed: {done.stderr.strip()[-2000:]}")
        drawn = {
            d.name: (Path(out, f"{d.name}.svg").read_text(), Path(out, f"{d.name}.png").read_bytes())
            for d in diagrams
        }
    drawings.mkdir(parents=True, exist_ok=True)
    for path in sorted({d.notebook for d in diagrams}):
        notebook = read_notebook(path)
        for diagram in (d for d in diagrams if d.notebook == path):
            svg, png = drawn[diagram.name]
            (drawings / f"{diagram.name}.svg").write_text(
                svg_with_hash(svg, diagram.sha256), encoding="utf-8"
            )
            cell = notebook["cells"][diagram.cell]
            png = png_with_text(png, HASH_KEY, diagram.sha256)
            cell.setdefault("attachments", {})[f"{diagram.name}.png"] = {
                PNG_MIME: base64.b64encode(png).decode()
            }
            print(f"drew {diagram.where}")
        write_notebook(path, notebook)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only say what is stale (exit 1 if anything is)")
    parser.add_argument("--all", action="store_true", help="draw every diagram, stale or not")
    args = parser.parse_args()
    if args.check:
        found = problems()
        for problem in found:
            print(problem)
        print(f"{len(found)} stale" if found else "every diagram matches its source")
        return 1 if found else 0
    every, chosen = 0, []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = read_notebook(path)
        for diagram in diagrams_in(path, notebook):
            every += 1
            if args.all or _stale(diagram, notebook["cells"][diagram.cell], DIAGRAMS):
                chosen.append(diagram)
    if chosen:
        render(chosen)
    leftover = problems()
    for problem in leftover:
        print(problem)
    print(f"drew {len(chosen)} of {every} diagrams")
    return 1 if leftover else 0


if __name__ == "__main__":
    sys.exit(main())
