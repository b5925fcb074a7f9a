"""Request body bytes -> a validated request model. Every way a body can be wrong (not UTF-8, not JSON,
too deep, numbers Python or JSON cannot hold, characters UTF-8 cannot hold, fields that fail
validation) is a 400 that names the problem and the field, never a 500 (docs/SERVING.md)."""
from __future__ import annotations

import json

from pydantic import BaseModel, ValidationError

from orl.serve.protocol import APIError

MAX_JSON_DEPTH = 32  # objects and arrays nested deeper than this are refused before validation


def parse_body(raw: bytes, model: type[BaseModel]) -> BaseModel:
    """bytes -> validated request; every failure is a 400 that names the problem and the field."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise APIError(400, f"request body is not valid UTF-8: {e}", code="invalid_encoding") from e
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise APIError(400, f"malformed JSON in request body: {e}", code="invalid_json") from e
    except RecursionError:  # the C decoder's own guard, long before MAX_JSON_DEPTH could be checked
        raise APIError(400, f"JSON in request body is nested deeper than {MAX_JSON_DEPTH} levels",
                       code="invalid_json") from None
    except ValueError as e:  # an integer literal over Python's 4300 digits, or NaN / Infinity
        raise APIError(400, f"invalid number in request body: {e}", code="invalid_json") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise APIError(400, f"JSON in request body is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")
    if bad := lone_surrogate(data):
        raise APIError(400, f"request body has a lone UTF-16 surrogate ({bad!r}), which is not a character",
                       code="invalid_json")
    if not isinstance(data, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        if first["type"] == "extra_forbidden":
            msg = f"unsupported field {param!r}"
        elif first["type"] == "missing":
            msg = f"missing required field {param!r}"
        elif param is None:
            msg = f"invalid request body: {first['msg']}"
        else:
            msg = f"invalid value for {param!r}: {first['msg'].removeprefix('Value error, ')}"
        more = len(e.errors()) - 1
        raise APIError(400, msg + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""),
                       param=param, code=first["type"]) from e


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (JSON numbers are finite)")


def json_depth(data: object) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    depth, todo = 0, [(data, 1)]
    while todo:
        node, d = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            depth = max(depth, d)
            if d > MAX_JSON_DEPTH:
                break
            todo.extend((c, d + 1) for c in children)
    return depth


def lone_surrogate(data: object) -> str | None:
    """A string (or key) of parsed JSON holding a lone "\\udXXX" escape: Python keeps it, but it cannot be
    encoded as UTF-8 again (not in a prompt, not in an error message naming it)."""
    todo = [data]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            todo.extend(node.keys())
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as e:
                return node[e.start:e.end]
    return None
