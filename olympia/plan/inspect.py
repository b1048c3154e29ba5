"""Write a catalog version back as spec files: one ``<namespace>.yaml`` per namespace.

Planning the written files against the same version yields no changes. Output is
deterministic (sorted names, fixed key order), so inspecting twice gives identical files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidArgumentError
from olympia.plan.icediff import has_metadata
from olympia.spec.iceberg import layout_of
from olympia.spec.loader import spec_files
from olympia.spec.schema import SCHEMA_FILE_NAME, schema_path
from olympia.spec.variables import escape
from olympia.spec.yamlpos import dump

MODELINE = "# yaml-language-server: $schema={schema}\n"
EMPTY_FILE = "_empty.yaml"  # what a version without namespaces is written as
EMPTY = ("# The inspected version has no namespaces. This document declares nothing; it makes\n"
         "# the folder a spec that plans to no changes.\n"
         "manage: []\n")


def namespace_document(namespace: Namespace, tables: list[Table], views: list[View],
                       ) -> dict[str, Any]:
    """The spec document of one namespace and its objects."""
    doc: dict[str, Any] = {"namespace": namespace.name}
    _common(doc, namespace.comment, namespace.protected)
    if namespace.properties:
        doc["properties"] = dict(sorted(namespace.properties.items()))
    if tables:
        doc["tables"] = {t.name: _table(t) for t in sorted(tables, key=lambda t: t.name)}
    if views:
        doc["views"] = {v.name: _view(v) for v in sorted(views, key=lambda v: v.name)}
    escaped: dict[str, Any] = _escaped(doc)
    return escaped


def _common(out: dict[str, Any], comment: str, protected: bool) -> None:
    if comment:
        out["comment"] = comment
    if protected:
        out["protected"] = True


def _table(table: Table) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _common(out, table.comment, table.protected)
    if table.format != "iceberg":
        out["format"] = table.format
    if table.table_type != "external":
        out["table_type"] = table.table_type
    if table.format == "iceberg":
        out.update(_iceberg(table))
    else:
        if table.location:
            out["location"] = table.location
        if table.format_properties:
            out["format_properties"] = dict(sorted(table.format_properties.items()))
    if table.properties:
        out["properties"] = dict(sorted(table.properties.items()))
    out["columns"] = [_column(c) for c in table.columns]
    return out


def _iceberg(table: Table) -> dict[str, Any]:
    """What a spec declares of an Iceberg table besides its columns: partitioning, sorting
    and a format version other than 2; never its metadata location or the format
    properties Iceberg writes (they change with every data commit)."""
    if not has_metadata(table):
        return {}
    out: dict[str, Any] = {}
    version = table.format_properties.get("format-version", "2")
    if version != "2" and version.isdigit():
        out["format_version"] = int(version)
    layout = layout_of(table.format_properties, table.columns)
    if layout.partition_by:
        out["partition_by"] = list(layout.partition_texts())
    if layout.sort_by:
        out["sort_by"] = list(layout.sort_texts())
    return out


def _view(view: View) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _common(out, view.comment, view.protected)
    out["dialect"] = view.dialect
    if view.default_namespace:
        out["default_namespace"] = view.default_namespace
    if view.referenced_objects:
        out["references"] = [{"namespace": ns, "name": name} if "." in ns else f"{ns}.{name}"
                             for ns, name in view.referenced_objects]
    if view.properties:
        out["properties"] = dict(sorted(view.properties.items()))
    if view.columns:
        out["columns"] = [_column(c) for c in view.columns]
    out["sql"] = view.sql.strip() + "\n"
    return out


def _column(col: Column) -> dict[str, Any]:
    return col.to_dict()


def _escaped(value: Any) -> Any:
    """Literal ``${var.X}`` in keys and values written as ``$${var.X}``."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escape(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def file_names(namespaces: list[str]) -> dict[str, str]:
    """A file name per namespace: percent-encoded, never hidden, unique even on
    case-insensitive file systems."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for ns in sorted(namespaces):
        stem = quote(ns, safe="")
        if stem.startswith("."):
            stem = "%2E" + stem[1:]
        name, n = f"{stem}.yaml", 1
        while name.casefold() in taken:
            n += 1
            name = f"{stem}~{n}.yaml"
        taken.add(name.casefold())
        out[ns] = name
    return out


def inspect(reader: CatalogReader, out_dir: str | Path, *, schema_ref: str | None = None,
            clean: bool = False) -> list[Path]:
    """Write every namespace of ``reader`` (a catalog or a Snapshot of any version) as a spec
    file under ``out_dir``; return the files written.

    Each file starts with a ``yaml-language-server`` modeline pointing at ``schema_ref``;
    by default a copy of the schema is written next to the files and referenced. A version
    without namespaces is written as ``_empty.yaml``, a document declaring nothing (so the
    folder is a spec that plans to no changes); a ``_empty.yaml`` from an earlier inspect
    is deleted otherwise. Other ``.yaml`` files already in ``out_dir`` would be merged into
    the spec: they are an error, or deleted with ``clean``.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"{out} is not a directory")
    namespaces, tables, views = reader.load_all()
    names = file_names([ns.name for ns in namespaces])
    wanted = {out / n for n in names.values()} if namespaces else {out / EMPTY_FILE}
    stray = [p for p in spec_files(out) if p not in wanted] if out.is_dir() else []
    others = [p for p in stray if p != out / EMPTY_FILE]  # that one is inspect's own
    if others and not clean:
        shown = ", ".join(str(p) for p in others[:5]) + (", ..." if len(others) > 5 else "")
        raise InvalidArgumentError(
            f"{out} holds other spec files, which would be merged with the inspected ones "
            f"({shown}): use an empty directory, or --clean to delete them")
    for path in stray:
        path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    if schema_ref is None:
        shutil.copyfile(schema_path(), out / SCHEMA_FILE_NAME)
        schema_ref = SCHEMA_FILE_NAME
    by_ns: dict[str, tuple[list[Table], list[View]]] = {ns.name: ([], []) for ns in namespaces}
    for table in tables:
        by_ns[table.namespace][0].append(table)
    for view in views:
        by_ns[view.namespace][1].append(view)
    texts = {names[ns.name]: dump(namespace_document(ns, *by_ns[ns.name]))
             for ns in namespaces} or {EMPTY_FILE: EMPTY}
    written = []
    for name, text in texts.items():
        path = out / name
        path.write_text(MODELINE.format(schema=schema_ref) + text, "utf-8")
        written.append(path)
    return written
