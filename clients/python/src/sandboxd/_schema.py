"""A small JSON Schema (draft 2020-12) validator for tool arguments.

It covers the keywords of sandboxd's request schemas (``api/schemas/``):
type, enum, const, required, properties, additionalProperties, items,
propertyNames, min/maxLength, pattern, minimum, maximum, exclusive bounds,
min/maxProperties, min/maxItems and uniqueItems. Its refusals name the
field as the API does (``limits.cpus``, ``files[0].path``) and word the
message as the API's own schema check does, quoting the field's
description, so that a model reads the same correction whether the client
or the service refused the call. Like the API, it takes a JSON ``null``
member as an absent one.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["SchemaError", "validate", "drop_nulls"]


@dataclass
class SchemaError:
    """One reason an instance does not conform: the field (``""`` for the
    whole object) and a message that says what is allowed."""

    field: str
    message: str
    unknown: bool = False


def drop_nulls(v: Any) -> Any:
    """A copy of v without object members whose value is null, at every
    depth (the API reads them as absent)."""
    if isinstance(v, Mapping):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v


def validate(schema: Mapping[str, Any], instance: Any) -> SchemaError | None:
    """Check instance against schema; ``None`` when it conforms, else the
    error to report (an unknown field before any other, since it explains
    the rest, as the API reports it)."""
    errors: list[SchemaError] = []
    _check(schema, drop_nulls(instance), [], instance, errors)
    if not errors:
        return None
    for e in errors:
        if e.unknown:
            return e
    return errors[0]


def _field(loc: Sequence[str | int]) -> str:
    out = ""
    for seg in loc:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + seg
    return out


def _text(v: Any) -> str:
    s = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return s if len(s) <= 80 else s[:77] + "..."


def _num_text(v: float) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


def _hint(schema: Mapping[str, Any]) -> str:
    d = schema.get("description")
    if not isinstance(d, str) or not d:
        return ""
    return ". " + d.rstrip(".") + "."


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, Mapping):
        return "object"
    return type(v).__name__


def _is(v: Any, t: str) -> bool:
    got = _type_of(v)
    if t == "number":
        return got in ("integer", "number") and not (isinstance(v, float) and not math.isfinite(v))
    if t == "integer":
        return got == "integer" or (got == "number" and float(v).is_integer())
    return got == t


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _check(schema: Mapping[str, Any], v: Any, loc: list[str | int], root: Any, errors: list[SchemaError]) -> None:
    if schema is True or not isinstance(schema, Mapping):
        return
    name = _field(loc)
    hint = _hint(schema)

    want = schema.get("type")
    if want is not None:
        types = [want] if isinstance(want, str) else list(want)
        if not any(_is(v, t) for t in types):
            errors.append(SchemaError(name, f"{name} must be {' or '.join(types)}, not {_type_of(v)}{hint}"))
            return

    if "const" in schema and not _equal(v, schema["const"]):
        errors.append(SchemaError(name, f"{name} is {_text(v)}; it must be {_text(schema['const'])}"))
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_equal(v, e) for e in enum):
        allowed = ", ".join(_text(e) for e in enum)
        errors.append(SchemaError(name, f"{name} is {_text(v)}; allowed: {allowed}{hint}"))

    if isinstance(v, str):
        n = len(v)
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if isinstance(lo, int) and n < lo:
            if lo == 1:
                errors.append(SchemaError(name, f"{name} must not be empty{hint}"))
            else:
                errors.append(SchemaError(name, f"{name} is {n} characters long; at least {lo} are needed"))
        if isinstance(hi, int) and n > hi:
            errors.append(SchemaError(name, f"{name} is {n} characters long; at most {hi} are accepted"))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, v) is None:
            errors.append(SchemaError(name, f"{name} {json.dumps(v)} does not match the pattern {pattern}{hint}"))

    if _type_of(v) in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if isinstance(lo, (int, float)) and v < lo:
            errors.append(SchemaError(name, f"{name} is {_text(v)}, below the minimum of {_num_text(lo)}{hint}"))
        if isinstance(hi, (int, float)) and v > hi:
            errors.append(SchemaError(name, f"{name} is {_text(v)}, above the maximum of {_num_text(hi)}{hint}"))
        if isinstance(xlo, (int, float)) and v <= xlo:
            errors.append(SchemaError(name, f"{name} is {_text(v)}; it must be more than {_num_text(xlo)}{hint}"))
        if isinstance(xhi, (int, float)) and v >= xhi:
            errors.append(SchemaError(name, f"{name} is {_text(v)}; it must be less than {_num_text(xhi)}{hint}"))

    if isinstance(v, list):
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        if isinstance(lo, int) and len(v) < lo:
            errors.append(SchemaError(name, f"{name} has {len(v)} items; at least {lo} are needed"))
        if isinstance(hi, int) and len(v) > hi:
            errors.append(SchemaError(name, f"{name} has {len(v)} items; at most {hi} are allowed"))
        if schema.get("uniqueItems") is True:
            for j in range(len(v)):
                dup = next((i for i in range(j) if _equal(v[i], v[j])), None)
                if dup is not None:
                    errors.append(SchemaError(name, f"{name} has the same value twice (items {dup} and {j}); name each once"))
                    break
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, x in enumerate(v):
                _check(items, x, loc + [i], root, errors)

    if isinstance(v, Mapping):
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        addl = schema.get("additionalProperties", True)
        for key in v:
            if key in props:
                continue
            if addl is False:
                allowed = ", ".join(props)
                where = f" in {name}" if name else ""
                errors.append(SchemaError(_field(loc + [key]), f"unknown field {json.dumps(key)}{where}; the fields allowed there are: {allowed}", unknown=True))
        for key in schema.get("required", []) or []:
            if key not in v:
                sub = props.get(key, {})
                fname = _field(loc + [key])
                errors.append(SchemaError(fname, f"{fname} is required{_hint(sub) if isinstance(sub, Mapping) else ''}"))
        lo, hi = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(lo, int) and len(v) < lo:
            errors.append(SchemaError(name, f"{name} has {len(v)} entries; at least {lo} are needed"))
        if isinstance(hi, int) and len(v) > hi:
            errors.append(SchemaError(name, f"{name} has {len(v)} entries; at most {hi} are allowed"))
        names = schema.get("propertyNames")
        if isinstance(names, Mapping):
            for key in v:
                sub: list[SchemaError] = []
                _check(names, key, loc, root, sub)
                if sub:
                    pattern = names.get("pattern", "")
                    errors.append(SchemaError(name, f"{name} has the name {json.dumps(key)}, which is not allowed: names must match {pattern}{hint}"))
                    break
        for key, x in v.items():
            if key in props:
                _check(props[key], x, loc + [key], root, errors)
            elif isinstance(addl, Mapping):
                _check(addl, x, loc + [key], root, errors)
