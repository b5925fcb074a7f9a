"""Settings on frozen dataclass configs, from `--set key.sub=value` or a TOML config file: the value is
parsed or checked against the field's annotation and applied with dataclasses.replace, so every
change reruns the config's own checks (__post_init__) and a bad value is named with its key."""
from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from pathlib import Path


def apply_overrides(cfg, items: list[str], path: str | Path | None = None):
    """A TOML file's settings (if a path is given), then --set KEY=VALUE items, applied together (a later one
    wins, so --set over the file), so that settings checked against each other change in one go:
    `--set tasks=a,b --set mix=3,1` in either order, or mix in the file and tasks on the command line."""
    changes = file_changes(cfg, path) if path is not None else {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        changes[key] = (parse(field_type(cfg, key), raw, f"--set {key}={raw}"), f"--set {key}={raw}")
    return replace_all(cfg, changes)


def apply_file(cfg, path: str | Path):
    """A TOML file of settings: top-level keys, [tables] for nested configs, or dotted keys; applied together."""
    return replace_all(cfg, file_changes(cfg, path))


def file_changes(cfg, path: str | Path) -> dict[str, tuple]:
    try:
        values = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"cannot read config file {path}: {e}") from None
    changes = {}
    for key, value in _flatten(values).items():
        where = f"{path}: {key}"
        changes[key] = (coerce(field_type(cfg, key), value, where), where)
    return changes


def field_names(cfg) -> list[str]:
    """Every settable key of cfg, nested ones dotted."""
    out = []
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        out += [f"{f.name}.{n}" for n in field_names(sub)] if dataclasses.is_dataclass(sub) else [f.name]
    return out


def describe_config(cfg) -> str:
    """One line per settable key: name, type, current value (`orl train --show-config`)."""
    rows = []
    for key in field_names(cfg):
        value = cfg
        for part in key.split("."):
            value = getattr(value, part)
        kind = field_type(cfg, key)
        rows.append((key, getattr(kind, "__name__", None) or str(kind).replace("typing.", ""), repr(value)))
    width = max(len(r[0]) for r in rows)
    tw = max(len(r[1]) for r in rows)
    return "\n".join(f"{k:<{width}}  {t:<{tw}}  {v}" for k, t, v in rows)


def field_type(cfg, key: str):
    """The annotation of a dotted key; an unknown key lists the valid ones, closest first."""
    *parents, name = key.split(".")
    for i, part in enumerate(parents):
        _check_name(cfg, part, key)
        cfg = getattr(cfg, part)
        if not dataclasses.is_dataclass(cfg):
            raise ValueError(f"{key}: {'.'.join(parents[:i + 1])!r} is a {type(cfg).__name__}, not a group of settings")
    _check_name(cfg, name, key)
    if dataclasses.is_dataclass(getattr(cfg, name)):
        sub = ", ".join(f"{name}.{n}" for n in field_names(getattr(cfg, name)))
        raise ValueError(f"{key}: {name!r} is a group of settings; set one of {sub}")
    return typing.get_type_hints(type(cfg))[name]


def replace_all(cfg, changes: dict[str, tuple]):
    """{dotted key: (value, where)} -> cfg with every change, one dataclasses.replace per config level, so a
    config's checks see all of its new values at once; a failed check names the settings of that level."""
    here, nested = {}, {}
    for key, (value, where) in changes.items():
        name, _, rest = key.partition(".")
        if rest:
            nested.setdefault(name, {})[rest] = (value, where)
        else:
            here[name] = (value, where)
    kwargs = {name: value for name, (value, _) in here.items()}
    kwargs.update({name: replace_all(getattr(cfg, name), sub) for name, sub in nested.items()})
    try:
        return dataclasses.replace(cfg, **kwargs)
    except (ValueError, TypeError) as e:
        # a config's check may cover its nested configs too (ORLConfig checks rollout): name every setting here
        raise ValueError(f"{'; '.join(where for _, where in changes.values())}: {e}") from None


def parse(kind, raw: str, where: str):
    """Text -> a value of the annotated type: int, float, bool, str, tuple[T, ...], T | None."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() in ("none", "null") and type(None) in args:
            return None
        return parse(_non_none(args), raw, where)
    if origin is tuple:
        return tuple(parse(args[0] if args else str, x.strip(), where) for x in raw.split(",") if x.strip())
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{where}: expected true or false")
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"{where}: expected {'an integer' if kind is int else 'a number'}") from None
    if kind is str:
        return raw
    raise ValueError(f"{where}: fields of type {kind} cannot be set from the command line")


def coerce(kind, value, where: str):
    """A typed value from a file -> the annotated type (ints are accepted as floats, nothing else)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return None if value is None and type(None) in args else coerce(_non_none(args), value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return tuple(coerce(args[0] if args else str, v, where) for v in value)
    if kind is float and type(value) in (int, float):
        return float(value)
    if kind in (int, bool, str) and type(value) is kind:
        return value
    raise ValueError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {value!r}")


def _non_none(args: tuple) -> type:
    rest = [a for a in args if a is not type(None)]
    return rest[0] if len(rest) == 1 else str


def _check_name(cfg, name: str, key: str) -> None:
    names = [f.name for f in dataclasses.fields(cfg)]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        rest = [n for n in names if n not in close]
        raise ValueError(f"{key}: {type(cfg).__name__} has no field {name!r}; valid: {', '.join(close + rest)}")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out
