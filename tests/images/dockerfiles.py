"""A small Dockerfile reader for the image tests (no Docker engine is needed).

It joins continuation lines, drops comments and parser directives, substitutes ARG defaults
declared before the first FROM into FROM lines, and splits the file into stages.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instruction:
    keyword: str  # upper-case: FROM, RUN, COPY, USER, ...
    args: str

    def exec_form(self) -> list[str] | None:
        """The JSON array of ENTRYPOINT/CMD in exec form, None in shell form."""
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def instructions(text: str) -> list[Instruction]:
    logical, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        logical.append(current)
        current = ""
    result = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    return result


def stages(path: Path) -> list[Stage]:
    global_args: dict[str, str] = {}
    found: list[Stage] = []
    for ins in instructions(path.read_text()):
        if ins.keyword == "ARG" and not found:
            name, _, default = ins.args.partition("=")
            global_args[name] = default.strip('"')
        elif ins.keyword == "FROM":
            words = re.sub(r"--platform=\S+\s*", "", ins.args).split()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)),
                          words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            found.append(Stage(base=base, name=name))
        elif found:
            found[-1].instructions.append(ins)
    return found


def copy_sources(stage: Stage) -> list[str]:
    """Sources of COPY instructions that read the build context (not --from= another stage)."""
    sources = []
    for ins in stage.all("COPY") + stage.all("ADD"):
        words = ins.args.split()
        if any(w.startswith("--from=") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources += paths[:-1]
    return sources


def dockerignore_allows(patterns: list[str], path: str) -> bool:
    """Whether a context path survives .dockerignore (last matching pattern wins, ! re-includes)."""
    path = path.strip("/")
    allowed = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        # A pattern matches the path itself or any of its parent directories.
        parts = path.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(c, pat) or fnmatch.fnmatchcase(c, pat.replace("**/", ""))
               for c in candidates):
            allowed = negate
    return allowed


def dockerignore_patterns(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def build_context(repo_root: Path, target: Path) -> None:
    """Copy the files .dockerignore lets into the build context, as `docker build` sends them."""
    patterns = dockerignore_patterns(repo_root / ".dockerignore")
    for path in repo_root.rglob("*"):
        relative = path.relative_to(repo_root).as_posix()
        if path.is_file() and dockerignore_allows(patterns, relative):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)
