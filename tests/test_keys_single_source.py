"""Every Redis key is spelled in antre/keys.py alone: no other module holds the literal prefix."""

from __future__ import annotations

import re
from pathlib import Path

import antre

PACKAGE = Path(antre.__file__).parent
#: The key prefix as code would spell it: alone in a literal, before a hash tag or a key name.
KEY_PREFIX = re.compile(
    r"""antre:[{\[]|["']antre:["'{]|antre:(queue|processing|retry|dead|job|idem|lock|stats|worker)""")


def test_only_keys_module_spells_the_prefix():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*"))
        if path.suffix in (".py", ".lua") and path.name != "keys.py"
        and KEY_PREFIX.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_pattern_finds_a_key_spelled_inline():
    assert KEY_PREFIX.search('key = "antre:{q}:queue"')
    assert KEY_PREFIX.search("antre:{default}:job:1")
    assert not KEY_PREFIX.search('"""antre: a reliable Redis job queue."""')
