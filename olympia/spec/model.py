"""The desired state a spec declares."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from olympia.catalog.objects import Namespace, Table, View
from olympia.spec.yamlpos import Position


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
    column_renames: dict[str, str] = field(default_factory=dict)  # new name -> old name


@dataclass(frozen=True)
class ViewSpec:
    view: View
    position: Position
    renamed_from: str | None = None


@dataclass
class Spec:
    """Namespaces, tables and views as declared, with where each was declared."""

    namespaces: dict[str, NamespaceSpec] = field(default_factory=dict)
    tables: dict[tuple[str, str], TableSpec] = field(default_factory=dict)
    views: dict[tuple[str, str], ViewSpec] = field(default_factory=dict)
    manage: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    digest: str = ""

    def manages(self, namespace: str) -> bool:
        """Declared by the spec, or matched by one of its ``manage`` patterns."""
        return namespace in self.namespaces or any(
            fnmatch.fnmatchcase(namespace, pattern) for pattern in self.manage)

    def declares(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.tables or (namespace, name) in self.views
