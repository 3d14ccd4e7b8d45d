"""The Python examples of the documentation pages and the README, read from their fences.

A fence's info string says what the test does with its block; GitHub, PyPI and MyST read
only its first word (the language), so the rest is free for this:

``python``
    Run. The blocks of one page run in order in one namespace, as a reader runs them.
``python settings``
    A ``settings.py`` fragment: run in a namespace seeded with the current ``CACHES`` and
    ``INSTALLED_APPS``; its upper-case names become Django settings, and every cache it names
    is then built and must pass the system checks.
``python not-run: <reason>``
    Not run, with the reason (a worker, a cluster, a model of your project). Still compiled,
    so its syntax cannot rot either; the test lists and counts these.

Blocks of pages that other changes write and that carry no such marks yet
(``UNANNOTATED``) are compiled and counted as not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: Pages whose blocks are not annotated yet (written by other changes): compiled only.
UNANNOTATED: set[str] = set()

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<lang>[\w+-]*)\s*(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: "docs/tutorial.md", "README.md"
    line: int  # the fence's line, 1-based
    kind: str  # "run", "settings" or "not-run"
    reason: str  # why not run ("" otherwise)
    source: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    found = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [README, *found]


def blocks(path: Path) -> list[Block]:
    """Return the ``python`` blocks of one page, in order."""
    page = str(path.relative_to(ROOT))
    unannotated = path.parent == DOCS and path.name in UNANNOTATED
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        line = index + 1
        body = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(ticks):
            text = lines[index]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            index += 1
        index += 1
        if opening["lang"] != "python":
            continue
        info = opening["info"].strip()
        source = "\n".join(body) + "\n"
        if info.startswith("not-run:"):
            found.append(Block(page, line, "not-run", info[len("not-run:") :].strip(), source))
        elif unannotated:
            reason = "on a page another change writes, not annotated yet"
            found.append(Block(page, line, "not-run", reason, source))
        elif info == "settings":
            found.append(Block(page, line, "settings", "", source))
        elif info == "":
            found.append(Block(page, line, "run", "", source))
        else:
            raise ValueError(f"{page}: unknown python fence info {info!r}")
    return found
