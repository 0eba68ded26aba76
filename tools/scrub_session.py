"""Scrub a recorded session (Codex JSONL or a transcript) before it is shared: paths and user names.

Every ``--replace OLD=NEW`` is applied to the raw text (longest OLD first), then the user's home
folder becomes ``/home/user`` and the user's name ``user`` wherever it stands as a path part.
The result must still parse (each line of a JSONL file, or the whole of a JSON file) and hold
none of the replaced strings, or nothing is written.

    python tools/scrub_session.py rollout.jsonl -o data/replays/codex-websocket.jsonl \\
        --replace /tmp/run/repo=/home/user/sample_repo --replace /tmp/run/home=/home/user/.codex
"""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
from pathlib import Path

HOME = "/home/user"


def scrub(text: str, replacements: dict[str, str], user: str, home: str) -> str:
    """The text with each OLD replaced by its NEW, then the home folder and user name.

    >>> scrub('{"cwd": "/home/ada/run/repo"}', {"/home/ada/run/repo": "/work/repo"}, "ada", "/home/ada")
    '{"cwd": "/work/repo"}'
    >>> scrub('"/Users/ada/x" "/home/ada" <ada>/x</ada>', {}, "ada", "/Users/ada")
    '"/home/user/x" "/home/user" <ada>/x</ada>'
    """
    for old in sorted(replacements, key=len, reverse=True):
        text = text.replace(old, replacements[old])
    if home not in ("", "/"):
        # the home folder as a whole path part: "/root" in "</root>" is markup, not a folder
        text = re.sub(rf"{re.escape(home)}(?=[/\\\"]|$)", HOME, text)
    if user:
        # the name as a folder under any home root, e.g. /home/ada or C:\\Users\\ada
        text = re.sub(rf"(?<=[/\\]){re.escape(user)}(?=[/\\\"])", "user", text)
    return text


def check(text: str, source: Path, forbidden: list[str]) -> None:
    """Still valid JSON (per line for .jsonl), and none of the forbidden strings left."""
    if source.suffix == ".jsonl":
        for line in text.splitlines():
            if line.strip():
                json.loads(line)  # raises with the position: the replacement broke this line
    else:
        json.loads(text)
    left = [old for old in forbidden if old in text]
    if left:
        raise SystemExit(f"{source}: still holds {left[0]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the recorded session")
    parser.add_argument("-o", "--out", type=Path, required=True, help="where to write the scrubbed copy")
    parser.add_argument("--replace", action="append", default=[], metavar="OLD=NEW", help="repeatable")
    args = parser.parse_args()
    replacements = dict(pair.split("=", 1) for pair in args.replace)
    text = args.source.read_text(encoding="utf-8")
    scrubbed = scrub(text, replacements, getpass.getuser(), str(Path.home()))
    check(scrubbed, args.source, list(replacements))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(scrubbed, encoding="utf-8")
    print(f"{args.out}: {len(text):,} -> {len(scrubbed):,} characters", file=sys.stderr)


if __name__ == "__main__":
    main()
