"""Registering job handlers: ``@antre.handler("send_email")`` on an ``async def`` or a ``def``.

A worker imports the modules named by ``--handlers`` and serves every type registered in the
registry it was given (the default registry unless a program builds its own).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from antre import errors
from antre.backoff import Backoff

HandlerFn = Callable[..., Any]
F = TypeVar("F", bound=HandlerFn)


@dataclass(frozen=True, slots=True)
class Handler:
    name: str
    fn: HandlerFn
    is_async: bool
    backoff: Backoff | None = None
    """Retry delays for this type; None uses the worker's."""
    timeout_s: float | None = None
    """Longest one run may take; None uses the worker's job timeout."""


class HandlerRegistry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str, fn: HandlerFn, *, backoff: Backoff | None = None,
                 timeout_s: float | None = None) -> Handler:
        if not isinstance(name, str) or not name:
            raise errors.InvalidArgument(f"handler name: got {name!r}; must be a non-empty string")
        existing = self._handlers.get(name)
        if existing is not None and existing.fn is not fn:
            raise errors.InvalidArgument(
                f"handler {name!r}: already registered to {existing.fn.__module__}."
                f"{existing.fn.__qualname__}; a job type has one handler"
            )
        if timeout_s is not None and not timeout_s > 0:
            raise errors.InvalidArgument(f"handler {name!r} timeout: got {timeout_s!r}; must be > 0")
        # An object with an async __call__ is a coroutine function too, in all but name.
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__)
        handler = Handler(name=name, fn=fn, is_async=is_async, backoff=backoff, timeout_s=timeout_s)
        self._handlers[name] = handler
        return handler

    def handler(self, name: str | None = None, *, backoff: Backoff | None = None,
                timeout: float | None = None) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            self.register(name or fn.__name__, fn, backoff=backoff, timeout_s=timeout)
            return fn
        return decorate

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


#: The registry ``@antre.handler`` writes to and ``antre worker`` serves.
default_registry = HandlerRegistry()


def handler(name: str | None = None, *, backoff: Backoff | None = None,
            timeout: float | None = None) -> Callable[[F], F]:
    """Registers the decorated function as the handler of job type ``name`` (default: the
    function's name). ``timeout`` is in seconds."""
    return default_registry.handler(name, backoff=backoff, timeout=timeout)


def import_modules(modules: Iterable[str]) -> None:
    """Imports the handler modules; a missing or broken one is reported by name, and a failure
    inside one (a missing dependency, a syntax error, an exception at import time) by the file
    and line where it happened. The current directory is importable, as with ``python -m``
    (Celery and RQ workers do the same)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        module = module.strip()
        if not module:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                raise errors.InvalidArgument(
                    f"handlers module {module!r}: not importable ({exc}); check --handlers and "
                    "PYTHONPATH") from None
            raise errors.InvalidArgument(
                f"handlers module {module!r}: its import of {exc.name!r} failed at "
                f"{_failure_site(exc)}: {exc}") from None
        except Exception as exc:
            raise errors.InvalidArgument(
                f"handlers module {module!r}: importing it failed at {_failure_site(exc)}: "
                f"{type(exc).__name__}: {exc}") from None


def _failure_site(exc: BaseException) -> str:
    """``file:line`` of the statement that raised: the syntax error's own position, else the
    innermost frame outside the import machinery."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith("<frozen ") and frame.filename != __file__]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "an unknown place"
