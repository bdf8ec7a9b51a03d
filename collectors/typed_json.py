"""Frozen dataclasses to and from plain JSON, checked field by field against their type hints.

The capture files (``rank{r}.meta.json``, ``run.json``) are declared once, as frozen dataclasses in
``collectors.manifest``; this module turns them into JSON payloads and back. Decoding checks every
field against its annotation and names the first fault by its path (``ranks[2].status: expected
one of 'complete', 'partial', got 'done'``), so a malformed file is refused in one line instead of
surfacing later as a KeyError. A field with a default may be absent (files written before the
field existed); a key the dataclass does not declare is a fault. A field's JSON key defaults to its
name; ``field(metadata={"json": "class"})`` renames it.

Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``Any``, ``Literal[...]``, ``X | None``,
``tuple[X, ...]``, ``tuple[X, Y]``, ``dict[str | int, X]`` and nested dataclasses. Standard library
only: the collectors import it inside training jobs.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


class SchemaError(ValueError):
    """A JSON payload that does not match its declared dataclass; the message names the field."""


def _key(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get("json", field.name))


@cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((field, hints[field.name]) for field in dataclasses.fields(cls) if field.init)


def to_json(value: Any) -> Any:
    """The plain JSON form of ``value`` (dataclasses become objects, tuples lists, dict keys strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_key(field): to_json(getattr(value, field.name)) for field, _ in _fields(type(value))}
    if isinstance(value, (tuple, list)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    return value


def from_json(cls: type[T], payload: Any, where: str = "") -> T:
    """Decode ``payload`` into dataclass ``cls``; SchemaError naming the first field that does not fit."""
    if not isinstance(payload, dict):
        raise SchemaError(f"{where or 'the file'}: expected a JSON object, got {_kind(payload)}")
    declared = {_key(field): (field, hint) for field, hint in _fields(cls)}
    unknown = sorted(set(payload) - set(declared))
    if unknown:
        raise SchemaError(f"{_join(where, unknown[0])}: unknown field (a newer format?)")
    values: dict[str, Any] = {}
    for key, (field, hint) in declared.items():
        if key in payload:
            values[field.name] = _decode(hint, payload[key], _join(where, key))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{_join(where, key)}: missing")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise SchemaError(f"{where or cls.__name__}: {error}") from None


def _decode(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:
            return _decode(options[0], value, where)
        for option in options:
            try:
                return _decode(option, value, where)
            except SchemaError:
                continue
        raise SchemaError(f"{where}: expected {_name(hint)}, got {_kind(value)}")
    if origin is Literal:
        if value not in args:
            raise SchemaError(f"{where}: expected one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise SchemaError(f"{where}: expected a list, got {_kind(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
        if len(value) != len(args):
            raise SchemaError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(_decode(arg, item, f"{where}[{i}]") for i, (arg, item) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected a JSON object, got {_kind(value)}")
        key_type, item_type = args
        decoded: dict[Any, Any] = {}
        for key, item in value.items():
            if key_type is int:
                if not (key.isdigit() or (key.startswith("-") and key[1:].isdigit())):
                    raise SchemaError(f"{where}: key {key!r} is not an integer")
                decoded[int(key)] = _decode(item_type, item, f"{where}[{key}]")
            else:
                decoded[key] = _decode(item_type, item, f"{where}[{key!r}]")
        return decoded
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise SchemaError(f"{where}: expected true or false, got {_kind(value)}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise SchemaError(f"{where}: expected an integer, got {_kind(value)}")
        return value
    if hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SchemaError(f"{where}: expected a number, got {_kind(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SchemaError(f"{where}: expected a string, got {_kind(value)}")
        return value
    raise AssertionError(f"unsupported annotation {hint!r} at {where}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)
