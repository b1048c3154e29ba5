"""The spec's JSON Schema and its errors as ``file:line:col`` problems.

The schema's single source is ``specs/olympia-spec.schema.json``; the package reaches it as
``olympia/spec/schema.json`` (a symbolic link in the source tree, which wheels and sdists
store as a regular file), so a non-editable install validates with the same document.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from olympia.spec.yamlpos import Document, Path_, Position, Problem

SCHEMA_FILE_NAME = "olympia-spec.schema.json"


def schema_path() -> Path:
    """Where the installed schema is."""
    return Path(str(resources.files("olympia.spec").joinpath("schema.json")))


@cache
def schema() -> dict[str, Any]:
    """The spec's JSON Schema (draft 2020-12)."""
    loaded: dict[str, Any] = json.loads(schema_path().read_text("utf-8"))
    return loaded


def schema_id() -> str:
    return str(schema()["$id"])


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(_inlined(schema()))


def _inlined(root: dict[str, Any]) -> dict[str, Any]:
    """``root`` with local ``$ref``s replaced by what they point at, except where that would
    recurse: the same validation, but resolving references dominates validating big specs."""

    def target(pointer: str) -> Any:
        node: Any = root
        for part in pointer.removeprefix("#/").split("/"):
            node = node[part]
        return node

    def walk(node: Any, expanding: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(item, expanding) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in expanding:
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**target(ref), **siblings}, (*expanding, ref))
        return {k: v if k == "$defs" else walk(v, expanding) for k, v in node.items()}

    inlined: dict[str, Any] = walk(root, ())
    return inlined


def validate(doc: Document) -> list[Problem]:
    """Every schema violation of ``doc``, pointing at the offending key or value (except
    at values that could not be read at all, which are reported already)."""
    return [Problem(_position(doc, e), _message(e)) for e in _validator().iter_errors(doc.data)
            if not any(tuple(e.absolute_path)[:len(p)] == p for p in doc.unreadable)]


def _position(doc: Document, error: ValidationError) -> Position:
    path = tuple(error.absolute_path)
    extra = _unexpected(error)
    if extra:
        return doc.at_key((*path, extra[0]))
    if error.validator == "propertyNames" or (
            error.parent is not None and error.parent.validator == "propertyNames"):
        return doc.at_key(path)
    return doc.at(path)


def _unexpected(error: ValidationError) -> list[str]:
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return []
    allowed = error.schema.get("properties", {})
    return [k for k in error.instance if k not in allowed]


def _where(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: ValidationError) -> str:
    path = tuple(error.absolute_path)
    extra = _unexpected(error)
    if extra:
        allowed = sorted(error.schema.get("properties", {}))
        if any(k.endswith(")") for k in extra) and "type" in allowed:
            message = ("a type with a comma was split by YAML flow syntax: quote it, e.g. "
                       'type: "decimal(12,2)"')
        else:
            guess = difflib.get_close_matches(extra[0], allowed, n=1)
            message = f"unknown key {extra[0]!r}" + (
                f" (did you mean {guess[0]!r}?)" if guess else "") + (
                f"; allowed: {', '.join(allowed)}")
    elif error.validator == "anyOf" and not path:
        message = ("a document declares a namespace ('namespace: NAME' with its tables and "
                   "views) or managed namespace patterns ('manage: [PATTERN]')")
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        message = f"missing required key {missing[0]!r}" if missing else error.message
    elif error.validator == "pattern":
        message = (f"{error.instance!r} is not allowed here: names may not contain control "
                   "characters, space or DEL, and references are written namespace.name")
    elif error.validator == "oneOf" and len(path) >= 2 and path[-2] == "references":
        message = ("a reference is 'namespace.name' or {namespace: NS, name: NAME} (for "
                   "namespaces containing dots)")
    elif error.validator == "minLength" and error.validator_value == 1:
        message = "must not be empty"
    else:
        message = error.message
    where = _where(path)
    return f"{where}: {message}" if where else message
