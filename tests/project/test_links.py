"""Every relative link a reader can click in the project's Markdown goes somewhere.

The README is the front door and the rest lives in docs/, benchmarks/README.md and the notebook
guide, so a moved file or a renamed heading must not leave a dead link behind: each relative link
(``[text](path#anchor)``, ``![alt](path)`` and ``<img src="path">``) in those files and in the
notebooks' Markdown cells must name a file that exists and, with an ``#anchor``, a heading of
that file, by GitHub's rule for a heading's anchor.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMG_SRC = re.compile(r"<img\b[^>]*?\bsrc=[\"']([^\"']+)[\"']", re.I)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
EXTERNAL = ("http://", "https://", "mailto:", "attachment:", "data:")


def documents() -> list[Path]:
    """The files whose links are checked: the front door, the docs, the guides, the notebooks."""
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "benchmarks" / "README.md",
        ROOT / "notebooks" / "README.md",
        *sorted((ROOT / "notebooks").glob("*.ipynb")),
    ]


def markdown_of(path: Path) -> str:
    """A file's Markdown: the file itself, or a notebook's Markdown cells joined.

    >>> import tempfile
    >>> nb = Path(tempfile.mkdtemp()) / "n.ipynb"
    >>> _ = nb.write_text('{"cells": [{"cell_type": "markdown", "source": ["# A"]},'
    ...                   ' {"cell_type": "code", "source": ["# not a heading"]}]}')
    >>> markdown_of(nb)
    '# A'
    """
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return text
    cells = json.loads(text)["cells"]
    return "\n\n".join(
        "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for cell in cells
        if cell["cell_type"] == "markdown"
    )


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped but '-' and '_', spaces to '-'.

    >>> slug("01 · The naive stateless loop (about 27 s headless)")
    '01--the-naive-stateless-loop-about-27-s-headless'
    >>> slug("`labkit compare`")
    'labkit-compare'
    >>> slug("Running labkit for a [room](x.md)")
    'running-labkit-for-a-room'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text).lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, the repeats numbered as GitHub numbers them ('x', 'x-1', ...).

    >>> sorted(anchors("# Setups\\n## Windows\\n```\\n# not one\\n```\\n## Windows"))
    ['setups', 'windows', 'windows-1']
    """
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(markdown: str) -> list[str]:
    """The relative link targets of some Markdown, code blocks and inline code left out.

    >>> links("[a](docs/x.md#y) ![b](p.svg) <img src='q.svg'> [c](https://e.org) `[d](no.md)`")
    ['docs/x.md#y', 'p.svg', 'q.svg']
    """
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    targets = [*LINK.findall(prose), *IMG_SRC.findall(prose)]
    return [target for target in targets if not target.lower().startswith(EXTERNAL)]


def broken_links(path: Path) -> list[str]:
    """Each link of ``path`` that names no file, or no heading of its file, with the reason."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for target in links(markdown_of(path)):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{where}: {target!r}: no file {file_part!r}")
        elif (
            anchor
            and linked.suffix in (".md", ".ipynb")
            and unquote(anchor).lower() not in anchors(markdown_of(linked))
        ):
            problems.append(f"{where}: {target!r}: {linked.name} has no heading #{anchor}")
    return problems


def test_every_relative_link_in_the_docs_and_notebooks_resolves() -> None:
    problems = [problem for path in documents() if path.exists() for problem in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_checked_files_are_there() -> None:
    for path in documents()[:1] + documents()[-5:]:
        assert path.exists(), path


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Running a room\n", encoding="utf-8")
    (tmp_path / "timeline.svg").write_text("<svg/>", encoding="utf-8")
    front = tmp_path / "README.md"
    front.write_text(
        "# Front\n\n"
        "[fine](docs/guide.md#running-a-room) ![fine](timeline.svg) [here](#front)\n"
        "[gone](docs/missing.md) [renamed](docs/guide.md#running-labkit-for-a-room)\n"
        '<img src="gone.svg"> [no such heading here](#back)\n'
        "```\n[in a code block](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(front)
    assert len(problems) == 4, problems
    assert "no file 'docs/missing.md'" in problems[0]
    assert "guide.md has no heading #running-labkit-for-a-room" in problems[1]
    assert "no file 'gone.svg'" in problems[3]
    assert "README.md has no heading #back" in problems[2]


def test_a_notebooks_markdown_links_are_checked_too(tmp_path: Path) -> None:
    notebook = tmp_path / "01.ipynb"
    cells = [
        {"cell_type": "markdown", "source": ["See [the guide](README.md#answers)."]},
        {"cell_type": "code", "source": ["# [not a link](nowhere.md)"]},
    ]
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert broken_links(notebook) == [f"{notebook}: 'README.md#answers': no file 'README.md'"]
    (tmp_path / "README.md").write_text("## Answers\n", encoding="utf-8")
    assert broken_links(notebook) == []
