"""Write a catalog version back as spec files: one ``<namespace>.yaml`` per namespace.

Planning the written files against the same version yields no changes. Output is
deterministic (sorted names, fixed key order), so inspecting twice gives identical files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

from olympia.catalog.objects import Namespace, Table, View
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidArgumentError
from olympia.plan.icediff import has_metadata
from olympia.spec import fields as described
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
    objects: dict[str, Any] = {}
    if tables:
        objects["tables"] = {t.name: _declared(t) for t in sorted(tables, key=lambda t: t.name)}
    if views:
        objects["views"] = {v.name: _declared(v) for v in sorted(views, key=lambda v: v.name)}
    doc = {"namespace": namespace.name, **_declared(namespace, objects)}
    escaped: dict[str, Any] = _escaped(doc)
    return escaped


def _declared(obj: Namespace | Table | View, extra: dict[str, Any] | None = None,
              ) -> dict[str, Any]:
    """What a spec declares of ``obj``, in the spec's key order: each described field not at
    its default, and the keys no definition stores from ``extra`` (an Iceberg table's
    layout, a namespace's tables and views)."""
    iceberg = isinstance(obj, Table) and obj.format == "iceberg"
    extra = _iceberg(obj) if isinstance(obj, Table) and iceberg else (extra or {})
    out: dict[str, Any] = {}
    for f in described.FIELDS[described.kind_of(obj)]:
        if not f.stored:
            if f.key in extra:
                out[f.key] = extra[f.key]
            continue
        if f.compare == described.Compare.NAME or (iceberg and f.iceberg_writes):
            continue
        value = f.value(obj)
        if f.spec_always or value != described.default(obj, f):
            out[f.key] = _spec_value(f, value)
    return out


def _spec_value(f: described.Field, value: Any) -> Any:
    """A field's value as a spec writes it."""
    match f.compare:
        case described.Compare.MAP:
            return dict(sorted(value.items()))
        case described.Compare.COLUMNS:
            return [c.to_dict() for c in value]
        case described.Compare.REFERENCES:
            return [{"namespace": ns, "name": name} if "." in ns else f"{ns}.{name}"
                    for ns, name in value]
        case described.Compare.SQL:
            return value.strip() + "\n"
    return value


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
