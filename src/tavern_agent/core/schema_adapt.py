"""Parameter schemas adapted to what each protocol's ``parameters`` field accepts.

OpenAI (non-strict) and Anthropic take JSON Schema as it is. Gemini's
``parameters`` is an OpenAPI 3.0 subset: it refuses ``additionalProperties``,
``$schema``, ``const``, type arrays and unknown keys, takes only string enums
and no ``$ref``. The adapter copies on write: a schema that needs no change is
returned as the very same object, which keeps snapshots of many tools cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tavern_agent.core.naming import ModelProtocol

# Keys of the Gemini ``Schema`` message (python-genai types.Schema).
_GEMINI_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "items",
        "properties",
        "required",
        "anyOf",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "pattern",
        "propertyOrdering",
        "default",
        "example",
    }
)
# A node with only these keys and a single type needs no change, nor do its parts.
_LEAF_KEYS = _GEMINI_KEYS - {"enum", "properties", "items", "anyOf"}
_MAX_REF_DEPTH = 16


def adapt_parameters(schema: Mapping[str, Any], protocol: ModelProtocol) -> Mapping[str, Any]:
    """The parameter schema to send for ``protocol``."""
    if protocol is ModelProtocol.GEMINI:
        # Descriptor schemas are never mutated, so an adapted copy can be reused for
        # as long as the very same schema object is alive (it is kept in the entry).
        hit = _GEMINI_CACHE.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        defs = schema.get("$defs") or schema.get("definitions") or {}
        adapted = _gemini(schema, defs if _is_map(defs) else {}, 0)
        _GEMINI_CACHE[id(schema)] = (schema, adapted)
        if len(_GEMINI_CACHE) > _CACHE_SIZE:
            _GEMINI_CACHE.pop(next(iter(_GEMINI_CACHE)))
        return adapted
    return schema


_CACHE_SIZE = 8192
_GEMINI_CACHE: dict[int, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}


def _is_map(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC's slow check for the usual dict."""
    return type(value) is dict or isinstance(value, Mapping)


def _plain_leaf(node: Any) -> bool:
    """A dict Gemini takes as it is, with no parts to look into."""
    return type(node) is dict and node.keys() <= _LEAF_KEYS and type(node.get("type")) is not list


def _gemini(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
    # One pass per node, copying only a node that changes: the first snapshot of a
    # process adapts every tool's schema (a thousand MCP tools: a few ms, not tens).
    if not _is_map(schema):
        return {}
    out: dict[str, Any] | None = None
    if not schema.keys() <= _GEMINI_KEYS:  # a key Gemini refuses, a $ref, oneOf or const
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return _gemini_ref(schema, ref, defs, depth)
        out = {k: v for k, v in schema.items() if k in _GEMINI_KEYS}
        if "oneOf" in schema and "anyOf" not in schema:
            out["anyOf"] = schema["oneOf"]
        if "const" in schema:
            out["enum"] = [schema["const"]]
    current = schema if out is None else out
    declared = current.get("type")
    if isinstance(declared, list):
        out = current = dict(current) if out is None else out
        kinds = [t for t in declared if t != "null"]
        if "null" in declared:
            out["nullable"] = True
        if len(kinds) == 1:
            out["type"] = kinds[0]
        else:
            out.pop("type", None)
            out["anyOf"] = [{"type": t} for t in kinds]
    enum = current.get("enum")
    if isinstance(enum, list) and not all(isinstance(e, str) for e in enum):
        out = current = dict(current) if out is None else out
        allowed = ", ".join(map(str, enum))
        out.pop("enum")
        out["description"] = f"{current.get('description', '')} Allowed: {allowed}.".strip()
    props = current.get("properties")
    if props is not None and _is_map(props):
        new_props: dict[str, Any] | None = None
        for key, sub in props.items():
            if _plain_leaf(sub):  # most properties: nothing to change
                continue
            new_sub = _gemini(sub, defs, depth)
            if new_sub is not sub:
                new_props = dict(props) if new_props is None else new_props
                new_props[key] = new_sub
        if new_props is not None:
            out = current = dict(current) if out is None else out
            out["properties"] = new_props
    items = current.get("items")
    if items is not None and not _plain_leaf(items) and _is_map(items):
        new_items = _gemini(items, defs, depth)
        if new_items is not items:
            out = current = dict(current) if out is None else out
            out["items"] = new_items
    branches = current.get("anyOf")
    if isinstance(branches, list):
        new_branches = [_gemini(b, defs, depth) for b in branches]
        if any(a is not b for a, b in zip(new_branches, branches, strict=True)):
            out = dict(current) if out is None else out
            out["anyOf"] = new_branches
    return schema if out is None else out


def _gemini_ref(
    schema: Mapping[str, Any], ref: str, defs: Mapping[str, Any], depth: int
) -> Mapping[str, Any]:
    """A ``$ref`` node: its target merged with the node's other keys, or a plain object
    when the target is unknown or nested too deep."""
    target = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/") else None
    if target is None or depth >= _MAX_REF_DEPTH:
        note = schema.get("description") or "A nested value."
        return {"type": "object", "description": note}
    merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return _gemini(merged, defs, depth + 1)


class NotStrictCompatible(ValueError):
    """The schema cannot be expressed in OpenAI strict mode; send it non-strict."""


def openai_strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI strict-mode form of a parameter schema.

    Every object gets ``additionalProperties: false`` and lists every property
    in ``required``; a property that was optional becomes nullable instead.
    ``oneOf`` becomes ``anyOf``, ``default`` is dropped and a ``$ref`` loses its
    sibling keys. Raises :class:`NotStrictCompatible` for what strict mode cannot
    say: a root that is not an object, open objects, arrays without ``items``.
    """
    if schema.get("type", "object") != "object" or "anyOf" in schema or "oneOf" in schema:
        raise NotStrictCompatible("the root must be a plain object")
    out = _strict(schema)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    out.setdefault("required", [])
    out["additionalProperties"] = False
    return out


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    declared = node.get("type")
    if isinstance(declared, str):
        return {**node, "type": [declared, "null"]} if declared != "null" else node
    if isinstance(declared, list):
        return node if "null" in declared else {**node, "type": [*declared, "null"]}
    return {"anyOf": [node, {"type": "null"}]}


def _strict(node: Any) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise NotStrictCompatible("a schema node is not an object")
    if isinstance(node.get("$ref"), str):
        return {"$ref": node["$ref"]}
    out = {k: v for k, v in node.items() if k not in ("default", "oneOf")}
    if "oneOf" in node:
        out["anyOf"] = node["oneOf"]
    declared = out.get("type")
    kinds = declared if isinstance(declared, list) else [declared]
    if "object" in kinds or "properties" in out:
        extra = out.get("additionalProperties", False)
        if extra is not False:
            raise NotStrictCompatible("open objects (additionalProperties) are not allowed")
        props = out.get("properties") or {}
        required = set(out.get("required") or ())
        new_props: dict[str, Any] = {}
        for key, sub in props.items():
            strict_sub = _strict(sub)
            new_props[key] = strict_sub if key in required else _nullable(strict_sub)
        out["properties"] = new_props
        out["required"] = list(new_props)
        out["additionalProperties"] = False
    if "array" in kinds and not isinstance(out.get("items"), Mapping):
        raise NotStrictCompatible("arrays need an items schema")
    if isinstance(out.get("items"), Mapping):
        out["items"] = _strict(out["items"])
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_strict(b) for b in out["anyOf"]]
    for defs_key in ("$defs", "definitions"):
        defs = out.get(defs_key)
        if isinstance(defs, Mapping):
            out[defs_key] = {k: _strict(v) for k, v in defs.items()}
    return out
