"""The spec's JSON Schema and its errors as ``file:line:col`` problems.

The schema's single source is ``specs/olympia-spec.schema.json``; the package reaches it as
``olympia/spec/schema.json`` (a symbolic link in the source tree, which wheels and sdists
store as a regular file), so a non-editable install validates with the same document.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import MAX_TYPE_PARAMETER, TYPE_NAMES, canonical_type
from olympia.exceptions import InvalidArgumentError
from olympia.spec import fields as described
from olympia.spec.yamlpos import MAX_PROBLEMS, Document, Path_, Problem, excerpt

SCHEMA_FILE_NAME = "olympia-spec.schema.json"
# a type's shape without the schema's bound on its parameters
_TYPE_SHAPE = re.compile(r"\s*[A-Za-z][A-Za-z0-9]*(\s*\(\s*[0-9]+\s*(,\s*[0-9]+\s*)?\))?\s*")


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
def validator() -> Draft202012Validator:
    """The spec schema's jsonschema validator (the errors it finds name what is wrong)."""
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


# --- whether a document is valid, fast ---------------------------------------------------
#
# jsonschema reports every error with its path, at a cost per value that dominates loading a
# big spec. Most documents are valid, so fastjsonschema (the schema compiled to Python code)
# answers "valid?" first, and only a document it refuses goes through jsonschema for the
# errors. The schema's keywords mean the same in draft 7, which fastjsonschema compiles.


@cache
def validity_check() -> Callable[[Any], bool]:
    """Whether a document is valid under :func:`schema` (jsonschema's verdict, faster)."""
    compiled = fastjsonschema.compile(
        {**schema(), "$schema": "http://json-schema.org/draft-07/schema#"})

    def check(document: Any) -> bool:
        try:
            compiled(document)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return check


@dataclass(frozen=True)
class Violation:
    """One schema error: the problem, and the path of the value or key it is about."""

    path: Path_
    problem: Problem
    local: bool = False  # a column's type: the rest of its table can still be checked


def violations(doc: Document) -> list[Violation]:
    """Every schema violation of ``doc``, pointing at the offending key or value (except
    at values that could not be read at all, which are reported already)."""
    if validity_check()(doc.data):
        return []  # valid: nothing for the (much slower) error reporting to find
    found = (e for e in validator().iter_errors(doc.data)
             if not any(tuple(e.absolute_path)[:len(p)] == p for p in doc.unreadable))
    out = _violations_of(doc, list(itertools.islice(found, MAX_PROBLEMS + 1)))
    if len(out) <= MAX_PROBLEMS:
        return out
    return [Violation((), Problem(doc.at(()), f"more than {MAX_PROBLEMS} schema errors in "
                                              f"this document; the first {MAX_PROBLEMS} are "
                                              "shown")), *out[:MAX_PROBLEMS]]  # () leaves it out


def _violations_of(doc: Document, errors: list[ValidationError]) -> list[Violation]:
    """``errors`` of ``doc`` as violations (at most MAX_PROBLEMS + 1 keys of one error)."""
    split = {tuple(e.absolute_path) for e in errors if _split_type(e)}
    out = []
    for error in errors:
        path = tuple(error.absolute_path)
        keys = _offending_keys(error)[:MAX_PROBLEMS + 1]
        if keys:
            out += [Violation((*path, k), Problem(doc.at_key((*path, k)), _message(error, k)))
                    for k in keys]
        elif _is_type_pattern(error) and path[:-1] not in split:  # else _split_type says it
            column = doc.get(path[:-1])
            name = column.get("name", path[-2]) if len(path) >= 2 else ""
            out.append(Violation(path, Problem(doc.at(path), f"column {excerpt(name)}: "
                                               f"{type_problem(error.instance)}"), local=True))
        elif not _is_type_pattern(error):
            out.append(Violation(path, Problem(doc.at(path), _message(error, None))))
    return out


def _offending_keys(error: ValidationError) -> list[str]:
    """The keys an error is about: unexpected keys, or a key that is not a valid name."""
    if "propertyNames" in error.relative_schema_path:
        return [error.instance]
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return []
    allowed = error.schema.get("properties", {})
    return [k for k in error.instance if k not in allowed]


def _split_type(error: ValidationError) -> bool:
    """Whether YAML flow syntax split a type at its comma (``{type: decimal(12,2)}``)."""
    return (error.validator == "additionalProperties"
            and "type" in error.schema.get("properties", {})
            and any(k.endswith(")") for k in _offending_keys(error)))


def _is_type_pattern(error: ValidationError) -> bool:
    return bool(error.validator == "pattern"
                and error.validator_value == schema()["$defs"]["type"]["pattern"])


# type names a guess may offer: the canonical ones, and the time types without precision
_GUESSES = sorted({re.sub(r"\(.*|(?<=[a-z])[369]$", "", n) for n in TYPE_NAMES})


def type_problem(spelling: str) -> str:
    """Why ``spelling`` is not a type the spec accepts, with the closest type name offered
    for an unknown one (``strct``: struct; ``timestamp(3)``: timestamp3)."""
    if not _TYPE_SHAPE.fullmatch(spelling):
        return (f"{excerpt(spelling)} is not a type: write a type name, with parameters "
                "where it takes them (int8, varchar(20), decimal(12,2)); nested types are "
                "type: struct, list or map with fields, element or key and value")
    try:
        canonical = canonical_type(spelling)
    except InvalidArgumentError as exc:
        head, sep, rest = str(exc).partition("; known types")
        if not head.startswith("unknown type"):
            return str(exc)
        text = " ".join(spelling.lower().split())[:100]
        precision = re.fullmatch(r"([a-z]+) ?\( ?([369]) ?\)", text)
        guess = ([precision[1] + precision[2]] if precision
                 and precision[1] + precision[2] in TYPE_NAMES
                 else difflib.get_close_matches(re.sub(r"\(.*", "", text).strip(), _GUESSES,
                                                n=1))
        return head + (f" (did you mean {guess[0]!r}?)" if guess else "") + sep + rest
    if canonical == "varchar":
        return ("varchar(0) is not a length: the catalog stores length 0 as unbounded text; "
                "write varchar")
    return (f"{excerpt(spelling)}: type parameters are whole numbers from 1 to "
            f"{MAX_TYPE_PARAMETER}, written without leading zeros")


_QUOTING = {"type": "is not of type", "enum": "is not one of",
            "anyOf": "is not valid under any of the given schemas",
            "oneOf": "is not valid under any of the given schemas"}


def _where(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: ValidationError, key: str | None) -> str:
    """The message of ``error``; ``key``: the offending key it is reported at, if any."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and key is not None:
        allowed = sorted(error.schema.get("properties", {}))
        if _split_type(error):
            message = ("a type with a comma was split by YAML flow syntax: quote it, e.g. "
                       'type: "decimal(12,2)"')
        else:
            guess = difflib.get_close_matches(key[:100], allowed, n=1)
            message = f"unknown key {excerpt(key)}" + (
                f" (did you mean {guess[0]!r}?)" if guess else "") + (
                f"; allowed: {', '.join(allowed)}")
    elif error.validator == "anyOf" and not path:
        message = ("a document declares a namespace ('namespace: NAME' with its tables and "
                   "views) or managed namespace patterns ('manage: [PATTERN]')")
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        message = f"missing required key {missing[0]!r}" if missing else error.message
    elif error.validator == "pattern":
        message = (f"{excerpt(error.instance)} is not allowed here: names may not contain control "
                   "characters, space or DEL, and references are written namespace.name")
    elif error.validator == "oneOf" and len(path) >= 2 and path[-2] == "references":
        message = ("a reference is 'namespace.name' or {namespace: NS, name: NAME} (for "
                   "namespaces containing dots)")
    elif error.validator == "minLength" and error.validator_value == 1:
        message = "must not be empty" if key is None else "a key must not be empty"
    elif error.validator in _QUOTING:  # jsonschema's message holds the whole value
        message = f"{excerpt(error.instance)} {_QUOTING[error.validator]}"
        value = error.validator_value
        if error.validator == "type":
            message += " " + ", ".join(map(repr, [value] if isinstance(value, str) else value))
        elif error.validator == "enum":
            message += f" {value!r}"
    else:
        message = error.message
    where = _where(path)
    return f"{where}: {message}" if where else message


# --- the keys olympia.spec.fields describes, written into the file -------------------------

SCHEMA_SECTIONS: dict[ObjectType, tuple[str, ...]] = {
    ObjectType.NAMESPACE: ("properties",), ObjectType.TABLE: ("$defs", "table", "properties"),
    ObjectType.VIEW: ("$defs", "view", "properties")}


def with_described_keys(document: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (the spec's JSON Schema) with each kind's keys as
    :mod:`olympia.spec.fields` describes them."""
    out = json.loads(json.dumps(document))
    for kind, path in SCHEMA_SECTIONS.items():
        node = out
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = described.spec_schema(kind)
    written: dict[str, Any] = out
    return written


def schema_text(document: Mapping[str, Any]) -> str:
    """The schema file's text: two-space indents, a final newline."""
    return json.dumps(document, indent=2) + "\n"


SCHEMA_FILE = Path(__file__).resolve().parents[2] / "specs" / "olympia-spec.schema.json"


def write_schema(path: Path = SCHEMA_FILE) -> None:
    """Write the described keys into the spec's JSON Schema file at ``path`` (by default
    specs/olympia-spec.schema.json of this source tree; ``make schema``)."""
    path.write_text(schema_text(with_described_keys(json.loads(path.read_text("utf-8")))),
                    "utf-8")
