"""A reader for the images' hashed requirements files (scripts/pin_images.sh writes them).

Each requirement is ``name==version`` followed by one ``--hash=sha256:...`` per file on PyPI,
continued with backslashes, then indented ``# via`` lines naming what needs it. Option lines
(``--only-binary``) are kept apart; comments at the start of a line are the file's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


@dataclass
class Locked:
    name: str  # canonical (PEP 503)
    version: str
    hashes: list[str] = field(default_factory=list)
    via: set[str] = field(default_factory=set)  # canonical names, or "pyproject.toml"


@dataclass
class Lock:
    packages: dict[str, Locked]
    options: list[str]
    problems: list[str]  # lines that are neither a pinned requirement, a hash nor an option


def read(path: Path) -> Lock:
    packages: dict[str, Locked] = {}
    options: list[str] = []
    problems: list[str] = []
    current: Locked | None = None
    in_via = False
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not raw.startswith((" ", "\t")):  # the file's own comments, not a "via" list
                in_via = False
                continue
            comment = line.lstrip("#").strip()
            if comment.startswith("via"):
                in_via = True
                comment = comment[3:].strip()
            # "-c tests/constraints.txt" only says which file bounded the version.
            if in_via and current is not None and comment and not comment.startswith("-"):
                current.via.add("pyproject.toml" if "pyproject.toml" in comment
                                else canonicalize_name(comment.split()[0]))
            continue
        in_via = False
        words = line.rstrip("\\").split()
        if raw.startswith((" ", "\t")) and current is not None:
            for word in words:
                (current.hashes if HASH.match(word) else problems).append(word)
            continue
        if line.startswith("--"):
            options.append(line)
            current = None
            continue
        match = REQUIREMENT.match(words[0]) if words else None
        if match is None or any(not HASH.match(w) for w in words[1:]):
            problems.append(line)
            current = None
            continue
        current = Locked(canonicalize_name(match["name"]), match["version"], hashes=words[1:])
        packages[current.name] = current
    return Lock(packages=packages, options=options, problems=problems)
