"""One Python module per Lua script, named alike: ``NAME.lua`` is run by ``NAME.py`` and by no
other module, so "where is the ack" is a glance at the file names, not a search."""

from __future__ import annotations

import re
from pathlib import Path

import antre.protocol

PROTOCOL = Path(antre.protocol.__file__).parent
LOADS = re.compile(r"""\bload\(\s*["']([a-z_]+)["']\s*\)""")


def test_every_script_has_its_module_and_runs_nowhere_else() -> None:
    scripts = {path.stem for path in PROTOCOL.glob("*.lua") if not path.stem.startswith("_")}
    loaded_by: dict[str, set[str]] = {}
    for module in PROTOCOL.glob("*.py"):
        for name in LOADS.findall(module.read_text()):
            loaded_by.setdefault(name, set()).add(module.stem)
    assert {name: {name} for name in scripts} == loaded_by


def test_every_module_beside_the_scripts_is_a_script_or_the_runner() -> None:
    """``prelude.py`` picks the part of ``_prelude.lua`` each script is loaded with."""
    scripts = {path.stem.lstrip("_") for path in PROTOCOL.glob("*.lua")}
    modules = {path.stem for path in PROTOCOL.glob("*.py")} - {"__init__", "scripts"}
    assert modules == scripts
