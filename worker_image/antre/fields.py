"""One declaration per setting: its name, environment variable, command-line flag, bounds and
help text live in the dataclass field's metadata (:func:`setting`), and everything else is
derived from there.

- validation, with messages that name the field, the value and what is allowed (:func:`check`,
  called from ``__post_init__``);
- reading ``ANTRE_*`` variables (:func:`values_from_env`) and argparse options with their
  parsing (:func:`add_arguments`, :func:`values_from_args`), where messages name the flag and
  the variable;
- the operator's env entries for a pod (:func:`env_entries`) and the docs tables
  (:func:`markdown_rows`);
- JSON request bodies of the HTTP API: parsing (:func:`parse_object`) and the OpenAPI schema
  (:func:`json_schema`) from the same fields.

Users: :mod:`antre.settings` (QueueSettings, WorkerSettings), :mod:`antre.backoff`,
:mod:`antre.api` and :mod:`antre.openapi`. A leaf: it imports only :mod:`antre.errors`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from antre import errors

#: The metadata key of a field's :class:`Setting`.
KEY: Final = "antre"
#: Stands for "no default": a required field of a request body.
REQUIRED: Final[Any] = dataclasses.MISSING

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Setting:
    help: str
    """What it does, for --help, the docs and the OpenAPI description."""
    env: str | None = None
    """Environment variable that sets it (ANTRE_*), if any."""
    flag: str | None = None
    """Command-line flag that sets it, if any."""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    """The value must be above ``minimum``, not equal to it."""
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    """For strings: a regular expression the whole value must match."""
    pattern_help: str = ""
    """How ``pattern`` reads in a message, e.g. "without control characters"."""
    label: str | None = None
    """Name in messages when it is not the field's name (e.g. "backoff base")."""
    validate: Callable[[Any], object] | None = None
    """An extra rule that raises InvalidArgument (queue names, prefixes)."""


def setting(default: Any, *, help: str, env: str | None = None, flag: str | None = None,
            minimum: float | None = None, maximum: float | None = None,
            exclusive_minimum: bool = False, min_length: int | None = None,
            max_length: int | None = None, pattern: str | None = None, pattern_help: str = "",
            label: str | None = None, validate: Callable[[Any], object] | None = None) -> Any:
    """A dataclass field carrying its :class:`Setting`; ``default`` may be :data:`REQUIRED`."""
    return dataclasses.field(default=default, metadata={KEY: Setting(
        help=help, env=env, flag=flag, minimum=minimum, maximum=maximum,
        exclusive_minimum=exclusive_minimum, min_length=min_length, max_length=max_length,
        pattern=pattern, pattern_help=pattern_help, label=label, validate=validate)})


def nested(factory: Callable[[], Any], *, help: str) -> Any:
    """A field holding a dataclass of settings of its own (WorkerSettings.backoff)."""
    return dataclasses.field(default_factory=factory, metadata={KEY: help})


@dataclass(frozen=True, slots=True)
class Entry:
    """A setting of a class, resolved: where it sits, its type and default."""

    path: str
    """Attribute path from the outer class, e.g. ``backoff.base_s``."""
    name: str
    kind: type
    """int, float, str, or object (any JSON value)."""
    optional: bool
    """None is allowed."""
    default: Any
    spec: Setting

    @property
    def label(self) -> str:
        return self.spec.label or self.name

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def option_label(self) -> str:
        """How a message names it on the command line: the flag and the variable."""
        parts = [self.spec.flag, f"(env {self.spec.env})" if self.spec.env else None]
        return " ".join(p for p in parts if p) or self.spec.env or self.label


_ENTRIES: dict[type, tuple[Entry, ...]] = {}


def entries(cls: type) -> tuple[Entry, ...]:
    """Every setting of ``cls``, nested dataclasses' included, in declaration order."""
    found = _ENTRIES.get(cls)
    if found is None:
        found = _ENTRIES[cls] = _resolve(cls)
    return found


def _resolve(cls: type) -> tuple[Entry, ...]:
    hints = typing.get_type_hints(cls)
    found: list[Entry] = []
    for field in dataclasses.fields(cls):
        meta = field.metadata.get(KEY)
        if isinstance(meta, str):  # nested()
            inner = hints[field.name]
            found.extend(dataclasses.replace(entry, path=f"{field.name}.{entry.path}")
                         for entry in entries(inner))
        elif isinstance(meta, Setting):
            kind, optional = _kind(hints[field.name])
            default = field.default if field.default is not dataclasses.MISSING else (
                field.default_factory() if field.default_factory is not dataclasses.MISSING
                else dataclasses.MISSING)
            found.append(Entry(path=field.name, name=field.name, kind=kind, optional=optional,
                               default=default, spec=meta))
    return tuple(found)


def _kind(hint: Any) -> tuple[type, bool]:
    if hint is Any:
        return object, True
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        (member,) = members
        return member, True
    return hint, False


def entry(cls: type, path: str) -> Entry:
    return next(e for e in entries(cls) if e.path == path)


# -- rules -------------------------------------------------------------------------------------

def _number_text(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def allowed(entry: Entry) -> str:
    """What a valid value is, in words: "an integer from 1 to 1000", "a number > 0"."""
    spec = entry.spec
    if entry.kind is str:
        shortest, longest = spec.min_length, spec.max_length
        text = "a string"
        if shortest is not None and longest is not None:
            text += f" of {shortest} to {longest} characters"
        elif longest is not None:
            text += f" of at most {longest} characters"
        return text + (f", {spec.pattern_help}" if spec.pattern_help else "")
    if entry.kind is object:
        return "any JSON value"
    text = "an integer" if entry.kind is int else "a number"
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None and not spec.exclusive_minimum:
        return f"{text} from {_number_text(low)} to {_number_text(high)}"
    if low is not None:
        text += f" {'>' if spec.exclusive_minimum else '>='} {_number_text(low)}"
    if high is not None:
        text += f"{' and' if low is not None else ''} <= {_number_text(high)}"
    return text


def violates(entry: Entry, value: Any) -> bool:
    """Whether ``value`` breaks the entry's type or bounds (None counts when optional)."""
    spec = entry.spec
    if value is None:
        return not entry.optional
    if entry.kind is object:
        return False
    if entry.kind is str:
        return (not isinstance(value, str)
                or (spec.min_length is not None and len(value) < spec.min_length)
                or (spec.max_length is not None and len(value) > spec.max_length)
                or (spec.pattern is not None and re.fullmatch(spec.pattern, value) is None))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    if entry.kind is int and not isinstance(value, int):
        return True
    if isinstance(value, float) and not math.isfinite(value):  # nan, inf: never a setting
        return True
    if spec.minimum is not None and (value <= spec.minimum if spec.exclusive_minimum
                                     else value < spec.minimum):
        return True
    return spec.maximum is not None and value > spec.maximum


def check_value(entry: Entry, value: Any, *, label: str | None = None) -> None:
    """Raises InvalidArgument "label: got value; must be ..." for a bad value."""
    if violates(entry, value):
        raise errors.InvalidArgument(f"{label or entry.label}: got {value!r}; must be "
                                     f"{allowed(entry)}")
    if value is not None and entry.spec.validate is not None:
        try:
            entry.spec.validate(value)
        except errors.InvalidArgument as exc:  # worded for the setting: name the option instead
            message = str(exc)
            if label is None or not message.startswith(entry.label + ":"):
                raise
            raise errors.InvalidArgument(label + message[len(entry.label):]) from None


def check(instance: Any) -> None:
    """Validates the direct settings of a dataclass instance (nested ones check themselves)."""
    for item in entries(type(instance)):
        if "." not in item.path:
            check_value(item, getattr(instance, item.name))


# -- environment and command line --------------------------------------------------------------

def parse_text(entry: Entry, raw: str, *, label: str) -> Any:
    """A value from text (an env var or a flag), converted to the entry's type."""
    if entry.kind is str:
        return raw
    try:
        return entry.kind(raw)
    except ValueError:
        wanted = "an integer" if entry.kind is int else "a number"
        raise errors.InvalidArgument(f"{label}: got {raw!r}; must be {wanted}") from None


def values_from_env(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """``{path: value}`` for the settings of ``cls`` whose variable is set and not blank."""
    values = {}
    for item in entries(cls):
        raw = env.get(item.spec.env) if item.spec.env else None
        if raw is not None and raw.strip():
            values[item.path] = parse_text(item, raw.strip(), label=item.spec.env or item.label)
    return values


def dest(item: Entry) -> str:
    """The argparse destination of a setting's flag: ``--backoff-base`` -> ``backoff_base``."""
    assert item.spec.flag is not None
    return item.spec.flag.removeprefix("--").replace("-", "_")


def default_text(item: Entry) -> str:
    if item.default is None or item.default is dataclasses.MISSING or item.default == "":
        return "none"
    return _number_text(item.default) if isinstance(item.default, int | float) else str(item.default)


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per setting of ``cls`` that has a flag, converted later by
    :func:`values_from_args` (so a bad value names the flag and the variable)."""
    for item in entries(cls):
        if item.spec.flag:
            env = f"env {item.spec.env}; " if item.spec.env else ""
            parser.add_argument(item.spec.flag, dest=dest(item), default=None,
                                help=f"{item.spec.help} ({env}default {default_text(item)})")


def values_from_args(cls: type, args: argparse.Namespace,
                     env: Mapping[str, str]) -> dict[str, Any]:
    """``{path: value}`` from the flags, else the variables: converted and checked, with
    messages naming ``--flag (env VAR)``."""
    values = {}
    for item in entries(cls):
        raw = getattr(args, dest(item), None) if item.spec.flag else None
        if raw is None and item.spec.env:
            raw = env.get(item.spec.env)
        if raw is None or not str(raw).strip():
            continue
        value = parse_text(item, str(raw).strip(), label=item.option_label)
        check_value(item, value, label=item.option_label)
        values[item.path] = value
    return values


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """An instance of ``cls`` from ``{path: value}`` (nested dataclasses built first). A
    cross-field error of a setting is reported under its flag and variable."""
    own = {path: value for path, value in values.items() if "." not in path}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        prefix = field.name + "."
        inner = {p[len(prefix):]: v for p, v in values.items() if p.startswith(prefix)}
        if inner:
            own[field.name] = build(typing.get_type_hints(cls)[field.name], inner)
    try:
        return cls(**own)
    except errors.InvalidArgument as exc:
        message = str(exc)
        for item in entries(cls):
            if item.path in values and message.startswith(item.label + ":"):
                raise errors.InvalidArgument(item.option_label + message[len(item.label):]) from None
        raise


# -- derived outputs ---------------------------------------------------------------------------

def env_text(value: Any) -> str:
    """A value as an environment variable holds it (floats without a needless ``.0``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def env_entries(cls: type, values: Mapping[str, Any]) -> list[dict[str, str]]:
    """Kubernetes EnvVar entries ``{"name", "value"}`` for ``{path: value}`` (None skipped)."""
    by_path = {item.path: item for item in entries(cls)}
    rendered = []
    for path, value in values.items():
        item = by_path[path]
        if item.spec.env is None:
            raise KeyError(f"{cls.__name__}.{path} has no environment variable")
        if value is not None:
            rendered.append({"name": item.spec.env, "value": env_text(value)})
    return rendered


def markdown_rows(cls: type) -> list[str]:
    """``| flag | env | default | meaning |`` rows of the settings with a variable."""
    return [f"| {f'`{item.spec.flag}`' if item.spec.flag else ''} | `{item.spec.env}` | "
            f"{default_text(item)} | {item.spec.help}"
            f"{'; ' + allowed(item) if item.kind is not str else ''} |"
            for item in entries(cls) if item.spec.env]


# -- JSON request bodies -----------------------------------------------------------------------

def type_name(value: Any) -> str:
    """The JSON type of a decoded value, for messages."""
    return "null" if value is None else {bool: "boolean", int: "integer", float: "number",
                                         str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__)


class BodyError(errors.InvalidArgument):
    """A request body field is missing, unknown or invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def shown(value: Any) -> str:
    """A JSON value for a message: compact, cut at 80 characters."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError):
        text = f"a deeply nested {type_name(value)}"
    return text if len(text) <= 80 else text[:77] + "..."


def parse_object(cls: type[T], body: Mapping[str, Any]) -> T:
    """``cls`` from a decoded JSON object: unknown and missing fields, types and bounds are
    reported as :class:`BodyError` naming the field, the value (as JSON) and what is allowed."""
    items = entries(cls)
    names = [item.name for item in items]
    for name in body:
        if name not in names:
            raise BodyError(name, f"{name}: unknown field; allowed: {', '.join(names)}")
    values = {}
    for item in items:
        if item.name not in body:
            if item.required:
                raise BodyError(item.name, f"{item.name}: missing; must be {allowed(item)}")
            continue
        value = body[item.name]
        if isinstance(value, float) and item.kind is int and value.is_integer():
            value = int(value)  # JSON Schema: 3.0 is an integer
        if item.kind is str and isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:  # a lone surrogate escape: valid JSON, not valid text
                raise BodyError(item.name, f"{item.name}: got {shown(value)} (string); must be "
                                "valid Unicode text (no unpaired surrogates)") from None
        if violates(item, value):
            nullable = "null or " if item.optional else ""
            raise BodyError(item.name, f"{item.name}: got {shown(value)} ({type_name(value)}); "
                            f"must be {nullable}{allowed(item)}")
        values[item.name] = value
    return cls(**values)


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema (OpenAPI 3.1) of a request body declared with :func:`setting`."""
    properties: dict[str, Any] = {}
    for item in entries(cls):
        spec = item.spec
        schema: dict[str, Any] = {}
        if item.kind is not object:
            name = {int: "integer", float: "number", str: "string"}[item.kind]
            schema["type"] = [name, "null"] if item.optional else name
        for key, value in (("minLength", spec.min_length), ("maxLength", spec.max_length),
                           ("maximum", spec.maximum)):
            if value is not None:
                schema[key] = value
        if spec.minimum is not None:
            schema["exclusiveMinimum" if spec.exclusive_minimum else "minimum"] = spec.minimum
        if spec.pattern is not None:
            schema["pattern"] = f"^(?:{spec.pattern})$"
        schema["description"] = spec.help
        properties[item.name] = schema
    required = [item.name for item in entries(cls) if item.required]
    return {"type": "object", "additionalProperties": False,
            **({"required": required} if required else {}), "properties": properties}
