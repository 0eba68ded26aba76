"""Write the glossary into the instructor guide: its last section, ``## Glossary``, ends with the
table ``labkit.analysis.glossary.markdown()`` makes, the same one ``lab.glossary()`` shows.

A new stage's definition (``labkit/api/stages.py``) changes that table; this puts it in the guide,
which ``tests/analysis/test_glossary.py`` then finds identical.

    python tools/sync_glossary.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from labkit.analysis.glossary import markdown

GUIDE = Path(__file__).resolve().parents[1] / "notebooks" / "README.md"
HEADING = "\n## Glossary\n"
HEADER_ROW = "| term | kind | meaning |"


def synced(guide: str) -> str:
    """The guide with its glossary table replaced by the current one (everything from the table's
    header row, in the glossary section, to the end)."""
    section = guide.index(HEADING)
    table = guide.index(HEADER_ROW, section)
    return guide[:table] + markdown()


def main() -> int:
    text = GUIDE.read_text(encoding="utf-8")
    if HEADING not in text:
        print(f"{GUIDE.name} has no '## Glossary' section", file=sys.stderr)
        return 2
    new = synced(text)
    if new == text:
        print("the guide's glossary is up to date")
    else:
        GUIDE.write_text(new, encoding="utf-8", newline="\n")
        print("the guide's glossary now matches lab.glossary()")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
