"""The ``antre`` package's public names: each is the object its module defines, loaded on first
use, and ``from antre import *`` gives all of them."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import antre
import pytest


def test_each_public_name_is_its_modules_object():
    assert sorted(antre.__all__) == sorted(antre._HOMES)
    for name in antre.__all__:
        home = importlib.import_module(antre._HOMES[name])
        assert getattr(antre, name) is getattr(home, name), name
    assert set(antre.__all__) <= set(dir(antre))


def test_star_import_gives_every_public_name():
    namespace: dict[str, object] = {}
    exec("from antre import *", namespace)
    assert set(antre.__all__) <= set(namespace)
    assert namespace["Queue"] is importlib.import_module("antre.client").Queue


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'antre' has no attribute 'Qeue'"):
        antre.Qeue  # noqa: B018
    with pytest.raises(ImportError, match="Qeue"):
        exec("from antre import Qeue", {})


def test_a_handler_module_loads_no_producer_code():
    """What a worker's handler module typically touches: handler, Job, Retry, Permanent."""
    code = ("import json, sys\nimport antre\n"
            "antre.handler, antre.Job, antre.Retry, antre.Permanent, antre.Backoff\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('antre'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    loaded = json.loads(out.stdout)
    assert "antre.handlers" in loaded
    assert [m for m in loaded if m in ("antre.client", "antre.enqueue_batcher",
                                       "antre.connection")] == []


def test_submodules_are_attributes_after_a_bare_import():
    code = ("import antre\n"
            "print(antre.errors.JobNotFound.__name__, antre.IdempotencyConflict.__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["JobNotFound", "antre.errors"]
