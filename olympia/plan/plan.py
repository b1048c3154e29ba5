"""Plans: what applying a spec would change, bound to the catalog state it was computed on.

A plan is made against one version (its base). It records the managed scope, one
fingerprint per managed namespace, the spec's digest and the ordered changes with the
typed operations that carry them out, so a saved plan applies exactly what was reviewed —
or refuses when what it manages has changed since. Its saved form is in
:mod:`olympia.plan.planfile`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectType
from olympia.catalog.reader import CatalogReader, Snapshot
from olympia.exceptions import (
    CorruptFileError,
    InvalidArgumentError,
    OlympiaError,
    SpecError,
    StorageError,
)
from olympia.inputs import MIB, read_user_file
from olympia.plan import render
from olympia.plan.changes import Change, ChangeSet
from olympia.plan.diff import compute_changes
from olympia.plan.gate import Gate
from olympia.plan.names import check_names
from olympia.plan.ops import (
    DropNamespace,
    DropTable,
    DropView,
    RenameNamespace,
    RenameTable,
    RenameView,
    stage_iceberg,
)
from olympia.plan.planfile import (
    PLAN_FORMAT,
    PLAN_FORMAT_VERSION,
    TARGETED_FORMAT_VERSION,
    seal,
    unseal,
)
from olympia.plan.state import Scope, fingerprint, load_current
from olympia.plan.target import Known, Target, TargetedScope, resolve_targets, select, targets_of
from olympia.spec.model import Key, Spec

WAREHOUSE = "warehouse"  # the catalog property Iceberg tables are created under
__all__ = ["PLAN_FORMAT", "PLAN_FORMAT_VERSION", "Plan", "make_plan"]
MAX_PLAN_BYTES = 256 * MIB  # a saved plan is read only up to this size


@dataclass
class Plan(ChangeSet):
    """Ordered changes plus what they were computed against."""

    catalog_uri: str
    catalog_id: str
    base_version: int
    scope: Scope
    managed: list[str]
    fingerprints: dict[str, str]
    spec_digest: str
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    spec_files: list[str] = field(default_factory=list)
    created_at: str = ""
    git_commit: str = ""  # of the spec; recorded with the version it is applied as

    @property
    def fingerprint(self) -> str:
        """One digest of every managed object and referenced object."""
        return fingerprint(self.fingerprints)

    @property
    def targets(self) -> tuple[Target, ...]:
        """What a targeted plan (``--target``) is limited to; empty for a whole plan."""
        return targets_of(self.scope)

    @property
    def partial_note(self) -> str:
        """For a targeted plan, the line saying it is partial; else empty."""
        return self.scope.describe() if isinstance(self.scope, TargetedScope) else ""

    def summary_line(self) -> str:
        return render.summary_line(self, *self._empty)

    @property
    def _empty(self) -> tuple[str, ...]:
        """What a plan without changes says, when a targeted one says it differently."""
        return ("No changes to the targeted objects.",) if self.partial_note else ()

    def render_text(self, color: bool | None = None) -> str:
        """Terraform-style text: ``+`` create, ``~`` change, ``-/+`` replace, ``-`` drop;
        colours on a terminal unless NO_COLOR is set (or as ``color`` says)."""
        title = f"Olympia plan for {self.catalog_uri}, based on version {self.base_version}."
        if self.partial_note:
            title += f"\n{self.partial_note}"
        return render.render(self, title, color, *self._empty)

    def to_dict(self, key: str | None = None) -> dict[str, Any]:
        """The versioned JSON form (``format``/``format_version``), with a checksum and,
        when ``key`` is given, an HMAC-SHA256 signature made with it."""
        targeted = {"targets": [t.to_dict() for t in self.targets]} if self.targets else {}
        body = {
            **targeted, "format": PLAN_FORMAT,
            "format_version": TARGETED_FORMAT_VERSION if targeted else PLAN_FORMAT_VERSION,
            "created_at": self.created_at, "olympia_version": _olympia_version(),
            "catalog": {"uri": self.catalog_uri, "id": self.catalog_id},
            "base_version": self.base_version, "scope": self.scope.to_dict(),
            "managed_namespaces": self.managed, "fingerprints": self.fingerprints,
            "fingerprint": self.fingerprint,
            "spec": {"digest": self.spec_digest, "files": self.spec_files,
                     "git_commit": self.git_commit},
            "has_changes": self.has_changes, "destructive": self.destructive,
            "summary": self.summary(), "warnings": self.warnings,
            "changes": [c.to_dict() for c in self.changes],
        }
        return seal(body, key)

    def save(self, path: str | Path, key: str | None = None) -> None:
        """Write the JSON form to ``path``, signed when ``key`` is given."""
        Path(path).write_text(json.dumps(self.to_dict(key), indent=2, sort_keys=True,
                                         ensure_ascii=False) + "\n", "utf-8")

    @classmethod
    def load(cls, path: str | Path, key: str | None = None) -> Plan:
        """A plan saved by :meth:`save`; InvalidArgumentError if it is not one, was edited
        since, or (``key`` given) is not signed with ``key``."""
        try:
            data = json.loads(read_user_file(path, MAX_PLAN_BYTES))
        except (InvalidArgumentError, UnicodeDecodeError, json.JSONDecodeError,
                RecursionError) as exc:
            raise InvalidArgumentError(f"{path}: not a readable plan file ({exc})") from None
        return cls.from_dict(data, str(path), key)

    @classmethod
    def from_dict(cls, data: Any, where: str = "plan", key: str | None = None) -> Plan:
        """A plan from its JSON form, every field and operation validated (see
        :func:`olympia.plan.planfile.unseal`); the changes' classification is not read.

        Raises:
            InvalidArgumentError: naming every malformed change and operation.
        """
        body = unseal(data, where, key)
        changes, problems = [], []
        for i, item in enumerate(body["changes"], 1):
            try:
                changes.append(Change.from_dict(item))
            except InvalidArgumentError as exc:
                problems.append(f"  change {i}: {exc}")
        if problems:
            raise InvalidArgumentError(f"{where}: malformed plan:\n" + "\n".join(problems))
        spec = body["spec"]
        scope = Scope.from_dict(body["scope"])
        if "targets" in body:  # what its operations may touch is derived from them
            scope = TargetedScope.of_changes(
                scope, [Target.from_dict(t) for t in body["targets"]], changes, where)
        return cls(body["catalog"]["uri"], body["catalog"]["id"], body["base_version"], scope,
                   list(body["managed_namespaces"]), dict(body["fingerprints"]),
                   spec["digest"], changes, list(body.get("warnings", [])),
                   list(spec.get("files", [])), body.get("created_at", ""),
                   spec.get("git_commit", ""))


def _olympia_version() -> str:
    try:
        return metadata.version("olympia-catalog")
    except metadata.PackageNotFoundError:
        return "unknown"


def make_plan(catalog: Catalog, spec: Spec, *, git_commit: str = "",
              read_all: bool = False, targets: Sequence[str] = ()) -> Plan:
    """Compare ``spec`` with the latest version of ``catalog``; ``git_commit`` (of the spec)
    is recorded in the plan. ``targets`` (``KIND.NAME`` texts, see
    :mod:`olympia.plan.target`) limit the plan to the changes of those objects and what they
    need; its fingerprints then cover only them.

    A definition whose file name carries the digest of the bytes the spec determines for it
    is taken from the spec without being read (a cold no-op plan reads almost nothing);
    ``read_all`` reads and verifies every managed definition instead, as a plan about to be
    applied at once does, so a corrupt file stops it before anything is committed.

    The changes are staged in a transaction that is then discarded, which checks that they
    apply and records the action types the transaction will write for each. Raises
    SpecError (``file:line:col``) when the spec contradicts the catalog, InvalidArgumentError
    when a target is malformed or names nothing in the spec or the managed namespaces.
    """
    catalog.refresh()
    snapshot = catalog.snapshot
    check_names(snapshot, spec)
    scope = Scope.of(spec)
    observed = scope.observe(snapshot)
    current = load_current(snapshot, observed, None if read_all else spec)
    chosen = resolve_targets(targets, Known(
        spec.namespaces.keys() | current.namespaces.keys(),
        spec.tables.keys() | current.tables.keys(), spec.views.keys() | current.views.keys(),
    )) if targets else []
    changes, warnings = compute_changes(spec, current, observed,
                                        catalog.properties.get(WAREHOUSE, ""))
    covered = observed
    if chosen:
        changes = select(changes, chosen)
        scope = TargetedScope.of_changes(scope, chosen, changes)
        covered = scope.narrow(snapshot, observed)
    _stage(catalog, snapshot, changes, observed.managed)
    return Plan(catalog.uri, catalog.catalog_def.id, snapshot.version, scope,
                observed.managed, covered.fingerprints(), spec.digest, changes,
                warnings + _dependents(snapshot, observed.managed, changes), list(spec.files),
                datetime.now(UTC).isoformat(timespec="seconds"), git_commit)


def _stage(catalog: Catalog, snapshot: Snapshot, changes: list[Change],
           managed: list[str]) -> None:
    """Stage every change in a discarded transaction on ``snapshot``: classifies each
    (destructive, refused) from its operations and fills in ``actions``."""
    txn = catalog.transaction(pb.SNAPSHOT, base=snapshot)
    stage_iceberg(txn, catalog, dry_run=True)  # Iceberg operations write no metadata file
    gate = Gate(txn, managed)
    problems = []
    try:
        for change in changes:
            try:
                gate.stage(change)
            except (CorruptFileError, StorageError):
                raise  # the catalog's or the storage's fault, not the spec's
            except OlympiaError as exc:
                problems.append(f"{change.source or change.name}: cannot {change}: {exc}")
    finally:
        txn.abort()
    if problems:
        raise SpecError(problems)


def _dependents(reader: CatalogReader, managed: list[str], changes: list[Change]) -> list[str]:
    """Warnings for views outside the managed namespaces that read objects this plan drops,
    renames or replaces with another kind."""
    gone: set[Key] = set()
    for change in changes:
        for o in change.ops:
            match o:
                case DropTable() | DropView() | RenameTable() | RenameView():
                    gone.add(o.identifier)
                case DropNamespace() | RenameNamespace():
                    gone.update((o.namespace, n) for n in _children(reader, o.namespace))
    if not gone:
        return []
    keep = set(managed)
    views = [(ref, path) for ref, path in reader.objects()
             if ref.type == ObjectType.VIEW and ref.namespace not in keep]
    warnings = []
    for (ref, _), view in zip(views, reader.files.read_defs([p for _, p in views], pb.ViewDef),
                              strict=True):
        for r in view.referenced_object_full_names:
            if (r.namespace_name, r.name) in gone:
                warnings.append(f"view {ref} (not managed by this spec) reads "
                                f"{r.namespace_name}.{r.name}, which this plan drops or renames")
    return warnings


def _children(reader: CatalogReader, namespace: str) -> list[str]:
    if not reader.namespace_exists(namespace):
        return []
    return reader.list_tables(namespace) + reader.list_views(namespace)
