"""`--set key.sub=value` on frozen dataclass configs: the value is parsed from the field's annotation
and applied with dataclasses.replace, so every override reruns the config's own checks
(__post_init__) and a bad value is named with its key."""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing


def apply_overrides(cfg, items: list[str]):
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        cfg = _set(cfg, key.split("."), raw, key)
    return cfg


def field_names(cfg) -> list[str]:
    """Every settable key of cfg, nested ones dotted (for --help and error messages)."""
    out = []
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        out += [f"{f.name}.{n}" for n in field_names(sub)] if dataclasses.is_dataclass(sub) else [f.name]
    return out


def _set(cfg, parts: list[str], raw: str, key: str):
    name = parts[0]
    names = [f.name for f in dataclasses.fields(cfg)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        rest = [n for n in names if n not in close]
        raise ValueError(f"--set {key}: {type(cfg).__name__} has no field {name!r}; valid: {', '.join(close + rest)}")
    current = getattr(cfg, name)
    if len(parts) > 1:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"--set {key}: {name!r} is a {type(current).__name__}, not a group of settings")
        value = _set(current, parts[1:], raw, key)
    elif dataclasses.is_dataclass(current):
        sub = ", ".join(f"{name}.{n}" for n in field_names(current))
        raise ValueError(f"--set {key}: {name!r} is a group of settings; set one of {sub}")
    else:
        value = parse(typing.get_type_hints(type(cfg))[name], raw, key)
    try:
        return dataclasses.replace(cfg, **{name: value})
    except (ValueError, TypeError) as e:
        raise ValueError(f"--set {key}={raw}: {e}") from None


def parse(kind, raw: str, key: str):
    """Text -> a value of the annotated type: int, float, bool, str, tuple[T, ...], T | None."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() in ("none", "null") and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)] or (str,)
        return parse(kind, raw, key)
    if origin is tuple:
        item = args[0] if args else str
        return tuple(parse(item, x.strip(), key) for x in raw.split(",") if x.strip())
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--set {key}={raw}: expected true or false")
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"--set {key}={raw}: expected {'an integer' if kind is int else 'a number'}") from None
    if kind is str:
        return raw
    raise ValueError(f"--set {key}: fields of type {kind} cannot be set from the command line")
