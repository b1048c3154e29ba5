"""The desired state a spec declares, with where each part was declared."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from olympia.catalog.objects import Namespace, Table, View
from olympia.spec.iceberg import Layout
from olympia.spec.yamlpos import Position

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class NamespaceSpec:
    namespace: Namespace
    position: Position
    renamed_from: str | None = None


@dataclass(frozen=True)
class TableSpec:
    table: Table
    position: Position
    renamed_from: str | None = None
    column_renames: Mapping[str, str] = field(default_factory=dict)  # new name -> old name
    # the fields a spec may omit to leave the catalog's value alone that it declares
    managed: frozenset[str] = frozenset()
    layout: Layout = field(default_factory=Layout)  # Iceberg: partitioning and sorting
    format_version: int | None = None  # Iceberg tables; None: not declared

    def manages(self, name: str) -> bool:
        """Whether the spec declares the table's field ``name`` (a field it may omit to
        leave the catalog's value alone: location, format properties)."""
        return name in self.managed

    @property
    def iceberg(self) -> bool:
        """Whether the table is declared as an Iceberg table."""
        return self.table.format == "iceberg"


@dataclass(frozen=True)
class ViewSpec:
    view: View
    position: Position
    renamed_from: str | None = None
    reference_positions: tuple[Position, ...] = ()


@dataclass
class Spec:
    """Namespaces, tables and views as declared, plus the namespace patterns it manages."""

    namespaces: dict[str, NamespaceSpec] = field(default_factory=dict)
    tables: dict[Key, TableSpec] = field(default_factory=dict)
    views: dict[Key, ViewSpec] = field(default_factory=dict)
    manage: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    digest: str = ""

    def manages(self, namespace: str) -> bool:
        """Declared (or renamed away from) by the spec, or matched by a ``manage`` pattern."""
        return namespace in self.declared_namespaces() or self.matches(namespace)

    def matches(self, namespace: str) -> bool:
        return any(fnmatch.fnmatchcase(namespace, p) for p in self.manage)

    def declared_namespaces(self) -> set[str]:
        """Declared namespaces and the old names of renamed ones."""
        return set(self.namespaces) | {s.renamed_from for s in self.namespaces.values()
                                       if s.renamed_from}

    def external_references(self) -> list[Key]:
        """Objects views read in namespaces the spec does not declare (they must exist)."""
        declared = self.declared_namespaces()
        return sorted({ref for v in self.views.values() for ref in v.view.referenced_objects
                       if ref[0] not in declared})

    def summary(self) -> str:
        return (f"{len(self.files)} files, {len(self.namespaces)} namespaces, "
                f"{len(self.tables)} tables, {len(self.views)} views")
