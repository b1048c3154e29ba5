"""What a plan compares: the managed namespaces, their objects, and a fingerprint of both.

Definition files are immutable and every change writes a new one, so the (key, definition
path) rows of a namespace's objects identify their state exactly: equal fingerprints mean
nothing managed changed, without reading a single definition file.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from google.protobuf.message import Message

from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Namespace, Table, View
from olympia.catalog.reader import CatalogReader
from olympia.plan.digests import known_definitions
from olympia.spec.model import Key, Spec
from olympia.spec.yamlpos import gc_paused

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Scope:
    """Which part of a catalog a spec manages, as saved with a plan."""

    declared: tuple[str, ...]  # declared namespaces and the old names of renamed ones
    patterns: tuple[str, ...] = ()  # ``manage`` patterns
    references: tuple[Key, ...] = ()  # objects views read outside the declared namespaces

    @classmethod
    def of(cls, spec: Spec) -> Scope:
        return cls(tuple(sorted(spec.declared_namespaces())), tuple(spec.manage),
                   tuple(spec.external_references()))

    def managed(self, reader: CatalogReader) -> list[str]:
        """Declared namespaces plus the existing ones a pattern matches."""
        names = set(self.declared)
        if self.patterns:
            names.update(n for n in reader.list_namespaces()
                         if any(fnmatch.fnmatchcase(n, p) for p in self.patterns))
        return sorted(names)

    def observe(self, reader: CatalogReader) -> Observed:
        """The managed namespaces' object rows and the referenced objects' existence."""
        managed = self.managed(reader)
        rows = {ns: reader.object_paths(ns) for ns in managed}
        outside = [r for r in self.references if r[0] not in rows]
        exists = {r: reader.table_exists(r) or reader.view_exists(r) for r in outside}
        return Observed(managed, rows, exists)

    def to_dict(self) -> dict[str, Any]:
        return {"declared": list(self.declared), "patterns": list(self.patterns),
                "references": [list(r) for r in self.references]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scope:
        return cls(tuple(data["declared"]), tuple(data.get("patterns", ())),
                   tuple((str(a), str(b)) for a, b in data.get("references", ())))


@dataclass
class Observed:
    managed: list[str]
    rows: dict[str, list[tuple[str, str]]]  # namespace -> (key, def path) of it and its objects
    references: dict[Key, bool] = field(default_factory=dict)

    def fingerprints(self) -> dict[str, str]:
        """One digest per managed namespace (over its objects' keys and definition paths),
        and one for the referenced objects outside them."""
        out = {ns: _digest(rows) for ns, rows in self.rows.items()}
        if self.references:
            out[""] = _digest((f"{a}.{b}", str(v)) for (a, b), v in sorted(
                self.references.items()))
        return out


def fingerprint(fingerprints: Mapping[str, str]) -> str:
    return _digest(sorted(fingerprints.items()))


def _digest(rows: Iterable[tuple[str, str]]) -> str:
    digest = hashlib.sha256()
    for key, value in rows:
        digest.update(f"{key}\0{value}\0".encode())
    return digest.hexdigest()


@dataclass
class Current:
    """The managed objects of one catalog version."""

    namespaces: dict[str, Namespace] = field(default_factory=dict)
    tables: dict[Key, Table] = field(default_factory=dict)
    views: dict[Key, View] = field(default_factory=dict)
    # tables and views whose definition is the one the spec declares for them, byte for
    # byte (column ids numbered as on create): they compare equal without looking
    as_declared: set[tuple[ObjectType, Key]] = field(default_factory=set)


def load_current(reader: CatalogReader, observed: Observed, spec: Spec | None = None,
                 ) -> Current:
    """Read the managed objects' definitions: one concurrent batch per kind, each file from
    the cache when an earlier plan has read it (definition paths are immutable).

    With ``spec``, a definition whose file name's digest is that of the bytes the spec
    determines for it is taken from the spec, not read (:mod:`olympia.plan.digests`): a
    cold no-op plan reads only the definitions that differ from the declaration."""
    with gc_paused():  # it builds an object per column of every managed object
        return _load_current(reader, observed, spec)


def _load_current(reader: CatalogReader, observed: Observed, spec: Spec | None,
                  ) -> Current:
    found: dict[ObjectType, list[tuple[ObjectRef, str]]] = {t: [] for t in ObjectType}
    for rows in observed.rows.values():
        for key, path in rows:
            ref = reader.codec.decode(key)
            found[ref.type].append((ref, path))
    known = {} if spec is None else known_definitions(
        (row for rows in found.values() for row in rows), spec)

    def load(rows: list[tuple[ObjectRef, str]], cls: type[M]) -> list[M]:
        paths = [p for _, p in rows]
        read = iter(reader.files.read_defs([p for p in paths if p not in known], cls))
        return [cast(M, known[p]) if p in known else next(read) for p in paths]

    current = Current()
    for msg in load(found[ObjectType.NAMESPACE], pb.NamespaceDef):
        namespace = Namespace.from_proto(msg)
        current.namespaces[namespace.name] = namespace
    t_rows = found[ObjectType.TABLE]
    for (ref, _), t in zip(t_rows, load(t_rows, pb.TableDef), strict=True):
        current.tables[(ref.namespace, ref.name)] = Table.from_proto(t, ref.namespace, ref.name)
    v_rows = found[ObjectType.VIEW]
    for (ref, _), v in zip(v_rows, load(v_rows, pb.ViewDef), strict=True):
        current.views[(ref.namespace, ref.name)] = View.from_proto(v, ref.namespace, ref.name)
    current.as_declared = {(ref.type, (ref.namespace, ref.name))
                           for ref, path in (*t_rows, *v_rows) if path in known}
    return current
