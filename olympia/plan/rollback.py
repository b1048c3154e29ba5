"""Rollback as a plan: the changes between the latest version and an older one, previewed and
gated like a plan before the format's rollback (:func:`olympia.versions.rollback`) commits.

The changes come from the plan comparison (the older version's objects as the desired
state, every namespace managed) and the plan's safety rules: drops, column removals,
incompatible type changes and removals of protection need ``allow_destructive``; an object
protected at the latest version is never dropped, replaced or changed incompatibly by a
rollback. What is committed is not these changes but the older version's tree itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectType
from olympia.catalog.reader import CatalogReader
from olympia.plan import render
from olympia.plan.apply import check_allowed
from olympia.plan.changes import Change, ChangeSet
from olympia.plan.diff import Differ
from olympia.plan.gate import UNPROTECT, Gate
from olympia.plan.ops import AlterTable
from olympia.plan.state import Scope, load_current
from olympia.spec import fields as described
from olympia.spec.model import NamespaceSpec, Spec, TableSpec, ViewSpec
from olympia.spec.yamlpos import Position
from olympia.versions import rollback as versions_rollback
from olympia.versions.rollback import rollback_target


@dataclass
class RollbackPlan(ChangeSet):
    """What rolling back from ``latest`` to ``target`` changes, object by object."""

    catalog_uri: str
    latest: int
    target: int
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def render_text(self, color: bool | None = None) -> str:
        """The changes in the plan's text form."""
        return render.render(
            self, f"Olympia rollback of {self.catalog_uri} from version {self.latest} to "
                  f"version {self.target}.", color,
            empty=f"No changes: version {self.target} holds the same objects as version "
                  f"{self.latest}.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: versions, summary and changes (action, type, name, details, reasons)."""
        return {"catalog": self.catalog_uri, "latest_version": self.latest,
                "to_version": self.target, "has_changes": self.has_changes,
                "destructive": self.destructive, "summary": self.summary(),
                "warnings": self.warnings, "changes": [
                    {k: v for k, v in c.to_dict().items() if k not in ("ops", "actions")}
                    for c in self.changes]}


def plan_rollback(catalog: Catalog, to_version: int | str) -> RollbackPlan:
    """The changes rolling the latest version of ``catalog`` back to ``to_version`` (a
    number or "previous") would make, classified.

    Raises:
        InvalidArgumentError: not a version, or not older than the latest.
        VersionExpiredError: the version has been expired.
    """
    catalog.refresh()
    latest = catalog.snapshot
    target = rollback_target(catalog, to_version, latest.version)
    spec = _as_spec(catalog.at_version(target), f"version {target}")
    observed = Scope(tuple(latest.list_namespaces())).observe(latest)
    changes = _Comparison(spec, load_current(latest, observed), observed).changes()
    txn = catalog.transaction(pb.SNAPSHOT, base=latest)  # read-only: classify, stage nothing
    try:
        gate = Gate(txn, observed.managed)
        for change in changes:
            gate.classify(change)
            _refuse_incompatible_protected(txn, change)
            change.ops, change.source = [], ""  # the commit restores the tree instead
    finally:
        txn.abort()
    return RollbackPlan(catalog.uri, latest.version, target, changes)


def apply_rollback(catalog: Catalog, rollback: RollbackPlan, *,
                   allow_destructive: bool = False,
                   info: Mapping[str, str] | None = None) -> int:
    """Commit the rollback ``rollback`` previews, annotated with ``info``; returns the new
    version.

    Raises:
        ProtectedDropError: it would drop, replace or incompatibly change protected objects.
        DestructiveChangeError: it is destructive and ``allow_destructive`` is false.
        CommitConflict: the catalog moved since the preview, or a commit raced this one.
    """
    check_allowed(rollback, allow_destructive, "rollback", "roll back")
    return versions_rollback(catalog, rollback.target, expect_latest=rollback.latest,
                             info=info)


class _Comparison(Differ):
    """The plan comparison, minus the checks of a spec's references (a version's views
    are what they are), comparing Iceberg tables' definitions as they are (a rollback
    restores their metadata locations too)."""

    iceberg_aware = False

    def _check_references(self) -> None:
        return None


def _as_spec(reader: CatalogReader, label: str) -> Spec:
    """Every object of a version as the desired state (column ids aside)."""
    where = Position(label, 0, 0)
    namespaces, tables, views = reader.load_all()
    return Spec(
        namespaces={n.name: NamespaceSpec(n, where) for n in namespaces},
        tables={(t.namespace, t.name): TableSpec(
            replace(t, columns=tuple(c.without_ids() for c in t.columns)), where,
            managed=frozenset(f.name for f in described.kept_when_omitted(ObjectType.TABLE)))
            for t in tables},
        views={(v.namespace, v.name): ViewSpec(
            replace(v, columns=tuple(c.without_ids() for c in v.columns)), where,
            reference_positions=tuple(where for _ in v.referenced_objects)) for v in views})


def _refuse_incompatible_protected(reader: CatalogReader, change: Change) -> None:
    """A table protected at the latest version is not changed incompatibly either."""
    harmful = [r for r in change.reasons if r != UNPROTECT]
    op = change.ops[0] if change.ops else None
    if not isinstance(op, AlterTable) or not harmful:
        return
    if reader.load_table(op.identifier).protected:
        change.blocked = (f"table {change.name} is protected at the latest version; the "
                          f"rollback {'; '.join(harmful)}")
