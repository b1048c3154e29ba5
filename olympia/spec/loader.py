"""Load a spec (a YAML file or a directory of them) into one validated desired state.

Every problem — invalid YAML, schema violations, unknown types, invalid names, duplicates
across files, views reading undeclared objects, undefined variables — is reported as
``file:line:col: message``, all at once, in one SpecError.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from olympia.catalog.keys import ObjectType, validate_name
from olympia.catalog.objects import Column, Namespace, Table, View, coerce_columns
from olympia.exceptions import InvalidArgumentError, InvalidNameError, SpecError
from olympia.spec.model import NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.yamlpos import (
    Document,
    Path_,
    Position,
    YamlProblem,
    expand_variables,
    load_documents,
)

DEFAULT_NAME_LIMIT = 100
ENV_PREFIX = "OLYMPIA_VAR_"


@cache
def schema() -> dict[str, Any]:
    """The spec's JSON Schema (specs/olympia-spec.schema.json, shipped in the package)."""
    text = resources.files("olympia.spec").joinpath("schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


def spec_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")
                      and p.is_file() and not any(part.startswith(".")
                                                  for part in p.relative_to(path).parts))
    return [path]


def collect_variables(variables: Mapping[str, str] | None) -> dict[str, str]:
    """``OLYMPIA_VAR_<NAME>`` from the environment, overridden by explicit ones."""
    found = {k[len(ENV_PREFIX):]: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    found.update({k: str(v) for k, v in (variables or {}).items()})
    return found


def load_spec(path: str | Path, variables: Mapping[str, str] | None = None) -> Spec:
    """Read, validate and merge every document under ``path``; raise SpecError listing every
    problem as ``file:line:col: message``."""
    root = Path(path)
    if not root.exists():
        raise SpecError([f"{root}: no such file or directory"])
    files = spec_files(root)
    if not files:
        raise SpecError([f"{root}: no .yaml or .yml files"])
    substitute = expand_variables(collect_variables(variables))
    builder = _Builder()
    digest = hashlib.sha256()
    for file in files:
        text = file.read_text("utf-8")
        digest.update(f"{file.relative_to(root) if root.is_dir() else file.name}\0{text}\0"
                      .encode())
        try:
            documents = load_documents(text, str(file), substitute)
        except YamlProblem as exc:
            builder.problems.append(str(exc))
            continue
        for doc in documents:
            errors = sorted(_validator().iter_errors(doc.data), key=lambda e: list(e.path))
            for error in errors:
                builder.problems.append(f"{_schema_position(doc, error)}: "
                                        f"{_schema_message(error)}")
            if not errors:
                builder.add(doc)
    builder.check_references()
    if builder.problems:
        raise SpecError(builder.problems)
    spec = builder.spec
    spec.files = [str(f) for f in files]
    spec.digest = digest.hexdigest()
    return spec


def _schema_position(doc: Document, error: ValidationError) -> Position:
    """Where to point: the unexpected key itself, else the offending value."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        extra = [k for k in error.instance if k not in allowed]
        if extra:
            return doc.at_key((*path, extra[0]))
    if error.validator == "propertyNames" or (path and error.parent is not None
                                              and error.parent.validator == "propertyNames"):
        return doc.at_key(path)
    return doc.at(path)


def _where(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _schema_message(error: ValidationError) -> str:
    where = _where(tuple(error.absolute_path))
    if error.validator == "anyOf" and not error.absolute_path:
        message = "a document needs 'namespace' (a namespace with its tables and views) or "\
                  "'manage' (namespace patterns)"
    elif error.validator == "additionalProperties" and any(
            str(k).endswith(")") for k in error.instance if k not in error.schema.get(
                "properties", {})):
        message = "a type with a comma was split by YAML flow syntax: quote it, e.g. " \
                  "type: \"decimal(12,2)\""
    elif error.validator == "pattern":
        message = f"{error.instance!r} contains characters not allowed here (control " \
                  "characters, space or DEL; references are written namespace.name)"
    else:
        message = error.message
    return f"{where}: {message}" if where else message


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _props(data: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): _text(v) for k, v in (data or {}).items()}


class _Builder:
    def __init__(self) -> None:
        self.spec = Spec()
        self.problems: list[str] = []
        self._docs: dict[tuple[str, str], tuple[Document, Path_]] = {}

    def problem(self, doc: Document, path: Path_, message: str, key: bool = False) -> None:
        """Record a problem at the value of ``path`` (or at its key)."""
        self.problems.append(f"{doc.at_key(path) if key else doc.at(path)}: {message}")

    def _name(self, doc: Document, path: Path_, kind: ObjectType, name: str) -> bool:
        try:
            validate_name(kind, name, DEFAULT_NAME_LIMIT)
            return True
        except InvalidNameError as exc:
            self.problem(doc, path, str(exc), key=len(path) > 1)
            return False

    def add(self, doc: Document) -> None:
        data = doc.data
        self.spec.manage.extend(data.get("manage", []))
        if "namespace" not in data:
            return
        ns = data["namespace"]
        if not self._name(doc, ("namespace",), ObjectType.NAMESPACE, ns):
            return
        if ns in self.spec.namespaces:
            first = self.spec.namespaces[ns].position
            self.problem(doc, ("namespace",), f"namespace {ns} is already declared at {first}")
            return
        self.spec.namespaces[ns] = NamespaceSpec(
            Namespace(ns, _props(data.get("properties")), data.get("comment", ""),
                      bool(data.get("protected", False))),
            doc.at(("namespace",)), data.get("renamed_from"))
        for name, body in (data.get("tables") or {}).items():
            self._table(doc, ns, name, body)
        for name, body in (data.get("views") or {}).items():
            self._view(doc, ns, name, body)

    def _columns(self, doc: Document, path: Path_, raw: list[dict[str, Any]],
                 ) -> tuple[tuple[Column, ...], dict[str, str]] | None:
        renames: dict[str, str] = {}
        columns = []
        ok = True
        for i, body in enumerate(raw):
            body = dict(body)
            if "renamed_from" in body:
                renames[body["name"]] = body.pop("renamed_from")
            try:
                columns.append(Column.coerce(_clean_column(body)))
            except InvalidArgumentError as exc:
                spot = (*path, i, "type") if "type" in str(exc) else (*path, i)
                self.problem(doc, spot, f"column {body.get('name')!r}: {exc}")
                ok = False
        if not ok:
            return None
        try:
            return coerce_columns(columns), renames
        except InvalidArgumentError as exc:
            self.problem(doc, path, str(exc))
            return None

    def _claim(self, doc: Document, path: Path_, ns: str, name: str) -> bool:
        key = (ns, name)
        if key in self._docs:
            other, other_path = self._docs[key]
            self.problem(doc, path, f"{ns}.{name} is already declared at "
                         f"{other.at_key(other_path)}", key=True)
            return False
        self._docs[key] = (doc, path)
        return True

    def _table(self, doc: Document, ns: str, name: str, body: dict[str, Any]) -> None:
        path: Path_ = ("tables", name)
        if not self._name(doc, path, ObjectType.TABLE, name) or not self._claim(doc, path, ns,
                                                                                 name):
            return
        built = self._columns(doc, (*path, "columns"), body.get("columns") or [])
        if built is None:
            return
        columns, renames = built
        table = Table(
            ns, name, columns, _props(body.get("properties")),
            str(body.get("format", "iceberg")).lower(),
            str(body.get("table_type", "external")).lower(), body.get("location", ""),
            _props(body.get("format_properties")), body.get("comment", ""),
            bool(body.get("protected", False)),
        )
        self.spec.tables[(ns, name)] = TableSpec(table, doc.at_key(path), body.get("renamed_from"),
                                                 renames)

    def _view(self, doc: Document, ns: str, name: str, body: dict[str, Any]) -> None:
        path: Path_ = ("views", name)
        if not self._name(doc, path, ObjectType.VIEW, name) or not self._claim(doc, path, ns,
                                                                                name):
            return
        built = self._columns(doc, (*path, "columns"), body.get("columns") or [])
        if built is None:
            return
        references = tuple(
            (r["namespace"], r["name"]) if isinstance(r, dict) else tuple(r.split(".", 1))
            for r in body.get("references") or [])
        view = View(ns, name, body["sql"].strip(), str(body.get("dialect", "ansi")), built[0],
                    references, body.get("default_namespace", ""),
                    _props(body.get("properties")), body.get("comment", ""),
                    bool(body.get("protected", False)))
        self.spec.views[(ns, name)] = ViewSpec(view, doc.at_key(path), body.get("renamed_from"))

    def check_references(self) -> None:
        """A view may only read objects the spec declares (in namespaces it declares)."""
        for (ns, name), view_spec in self.spec.views.items():
            for i, (ref_ns, ref_name) in enumerate(view_spec.view.referenced_objects):
                if ref_ns in self.spec.namespaces and not self.spec.declares(ref_ns, ref_name):
                    doc, path = self._docs[(ns, name)]
                    self.problem(doc, (*path, "references", i),
                                 f"view {ns}.{name} references {ref_ns}.{ref_name}, which the "
                                 "spec does not declare")


def _clean_column(body: dict[str, Any]) -> dict[str, Any]:
    """Drop spec-only keys from a column (and its nested parts) before Column.coerce."""
    out = {k: v for k, v in body.items() if k != "renamed_from"}
    if "properties" in out:
        out["properties"] = _props(out["properties"])
    if "fields" in out:
        out["fields"] = [_clean_column(f) for f in out["fields"]]
    for part in ("element", "key", "value"):
        if part in out:
            out[part] = _clean_column(out[part])
    return out
