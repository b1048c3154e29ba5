"""Write a catalog version back as spec files: one ``<namespace>.yaml`` per namespace.

Planning the written files against the same catalog yields no changes.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import CatalogReader

MODELINE = "# yaml-language-server: $schema={schema}\n"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (view SQL) as literal blocks; otherwise plain safe YAML."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _column(col: Column) -> dict[str, Any]:
    return col.to_dict()


def namespace_document(namespace: Namespace, tables: list[Table], views: list[View],
                       ) -> dict[str, Any]:
    doc: dict[str, Any] = {"namespace": namespace.name}
    if namespace.comment:
        doc["comment"] = namespace.comment
    if namespace.protected:
        doc["protected"] = True
    if namespace.properties:
        doc["properties"] = dict(sorted(namespace.properties.items()))
    if tables:
        doc["tables"] = {t.name: _table(t) for t in sorted(tables, key=lambda t: t.name)}
    if views:
        doc["views"] = {v.name: _view(v) for v in sorted(views, key=lambda v: v.name)}
    return doc


def _table(table: Table) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if table.comment:
        out["comment"] = table.comment
    if table.protected:
        out["protected"] = True
    if table.format != "iceberg":
        out["format"] = table.format
    if table.table_type != "external":
        out["table_type"] = table.table_type
    if table.location:
        out["location"] = table.location
    if table.format_properties:
        out["format_properties"] = dict(sorted(table.format_properties.items()))
    if table.properties:
        out["properties"] = dict(sorted(table.properties.items()))
    out["columns"] = [_column(c) for c in table.columns]
    return out


def _view(view: View) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if view.comment:
        out["comment"] = view.comment
    if view.protected:
        out["protected"] = True
    out["dialect"] = view.dialect
    if view.default_namespace:
        out["default_namespace"] = view.default_namespace
    if view.referenced_objects:
        out["references"] = [f"{ns}.{name}" if "." not in ns else {"namespace": ns,
                                                                   "name": name}
                             for ns, name in view.referenced_objects]
    if view.properties:
        out["properties"] = dict(sorted(view.properties.items()))
    if view.columns:
        out["columns"] = [_column(c) for c in view.columns]
    out["sql"] = view.sql.strip() + "\n"
    return out


def file_name(namespace: str) -> str:
    return quote(namespace, safe="") + ".yaml"


def inspect(reader: CatalogReader, out_dir: str | Path, schema_ref: str | None = None,
            ) -> list[Path]:
    """Write every namespace of ``reader`` as a spec file under ``out_dir``; return the files.

    ``schema_ref`` goes into each file's ``yaml-language-server`` modeline (a path or URL of
    specs/olympia-spec.schema.json); by default, the relative path to the installed schema.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if schema_ref is None:
        installed = Path(str(resources.files("olympia.spec").joinpath("schema.json")))
        schema_ref = os.path.relpath(installed.resolve(), out.resolve())
    namespaces, tables, views = reader.load_all()
    written = []
    for ns in namespaces:
        doc = namespace_document(ns, [t for t in tables if t.namespace == ns.name],
                                 [v for v in views if v.namespace == ns.name])
        text = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
        path = out / file_name(ns.name)
        path.write_text(MODELINE.format(schema=schema_ref) + text, "utf-8")
        written.append(path)
    return written
