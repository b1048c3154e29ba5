"""Plans: what applying a spec would change, bound to the catalog state it was computed on.

A plan is made against one version (its base). It records the managed scope, one
fingerprint per managed namespace, the spec's digest and the ordered changes with the
Transaction calls that carry them out, so a saved plan applies exactly what was reviewed —
or refuses when what it manages has changed since.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import type_name
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectType
from olympia.catalog.reader import CatalogReader, Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import InvalidArgumentError, OlympiaError, SpecError
from olympia.inputs import MIB, read_user_file
from olympia.plan import render
from olympia.plan.changes import OPS, VERBS, Change
from olympia.plan.diff import check_names, compute_changes
from olympia.plan.state import Scope, fingerprint, load_current
from olympia.spec.model import Key, Spec

PLAN_FORMAT = "olympia-plan"
PLAN_FORMAT_VERSION = 1
MAX_PLAN_BYTES = 256 * MIB  # a saved plan is read only up to this size


@dataclass
class Plan:
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
    def has_changes(self) -> bool:
        return bool(self.changes)

    @property
    def destructive(self) -> bool:
        return any(c.destructive for c in self.changes)

    @property
    def blocked(self) -> list[Change]:
        """Changes refused whatever the options (drops of protected objects)."""
        return [c for c in self.changes if c.blocked]

    def summary(self) -> dict[str, int]:
        counts = {verb: 0 for verb in VERBS}
        for change in self.changes:
            counts[change.action] += 1
        counts["destructive"] = sum(c.destructive for c in self.changes)
        counts["blocked"] = len(self.blocked)
        return counts

    def summary_line(self) -> str:
        return render.summary_line(self)

    def render_text(self, color: bool | None = None) -> str:
        """Terraform-style text: ``+`` create, ``~`` change, ``-/+`` replace, ``-`` drop;
        colours on a terminal unless NO_COLOR is set (or as ``color`` says)."""
        return render.render(self, color)

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON form (``format``/``format_version``), with a checksum."""
        body = {
            "format": PLAN_FORMAT, "format_version": PLAN_FORMAT_VERSION,
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
        return {**body, "checksum": _checksum(body)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True,
                                         ensure_ascii=False) + "\n", "utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """A plan saved by :meth:`save`; InvalidArgumentError if it is not one, or was
        edited since."""
        try:
            data = json.loads(read_user_file(path, MAX_PLAN_BYTES))
        except (InvalidArgumentError, UnicodeDecodeError, json.JSONDecodeError,
                RecursionError) as exc:
            raise InvalidArgumentError(f"{path}: not a readable plan file ({exc})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "plan") -> Plan:
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise InvalidArgumentError(f"{where}: not an {PLAN_FORMAT} file")
        if data.get("format_version") != PLAN_FORMAT_VERSION:
            raise InvalidArgumentError(
                f"{where}: plan format version {data.get('format_version')} is not supported "
                f"(this olympia reads version {PLAN_FORMAT_VERSION}); re-plan")
        body = {k: v for k, v in data.items() if k != "checksum"}
        if data.get("checksum") != _checksum(body):
            raise InvalidArgumentError(f"{where}: the plan file was modified after it was "
                                       "saved (checksum mismatch); re-plan")
        try:
            plan = cls(data["catalog"]["uri"], data["catalog"]["id"], int(data["base_version"]),
                       Scope.from_dict(data["scope"]), list(data["managed_namespaces"]),
                       dict(data["fingerprints"]), data["spec"]["digest"],
                       [Change.from_dict(c) for c in data["changes"]],
                       list(data.get("warnings", [])), list(data["spec"].get("files", [])),
                       data.get("created_at", ""), str(data["spec"].get("git_commit", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{where}: malformed plan ({exc!r})") from None
        return plan


def _checksum(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _olympia_version() -> str:
    try:
        return metadata.version("olympia-catalog")
    except metadata.PackageNotFoundError:
        return "unknown"


def make_plan(catalog: Catalog, spec: Spec, *, git_commit: str = "") -> Plan:
    """Compare ``spec`` with the latest version of ``catalog``; ``git_commit`` (of the spec)
    is recorded in the plan.

    The changes are staged in a transaction that is then discarded, which checks that they
    apply and records the action types the transaction will write for each. Raises
    SpecError (``file:line:col``) when the spec contradicts the catalog.
    """
    catalog.refresh()
    snapshot = catalog.snapshot
    check_names(snapshot, spec)
    scope = Scope.of(spec)
    observed = scope.observe(snapshot)
    changes = compute_changes(spec, load_current(snapshot, observed), observed)
    _stage(catalog, snapshot, changes)
    return Plan(catalog.uri, catalog.catalog_def.id, snapshot.version, scope,
                observed.managed, observed.fingerprints(), spec.digest, changes,
                _dependents(snapshot, observed.managed, changes), list(spec.files),
                datetime.now(UTC).isoformat(timespec="seconds"), git_commit)


def _stage(catalog: Catalog, snapshot: Snapshot, changes: list[Change]) -> None:
    """Stage every change in a discarded transaction on ``snapshot``; fill in ``actions``."""
    txn = Transaction(catalog, snapshot, pb.SNAPSHOT)
    problems = []
    try:
        for change in changes:
            if change.blocked:  # the catalog would refuse it: name what it would record
                change.actions = [OPS[o["op"]] for o in change.ops]
                continue
            before = len(txn.actions)
            try:
                change.run(txn)
            except OlympiaError as exc:
                problems.append(f"{change.source or change.name}: cannot {change}: {exc}")
                continue
            change.actions = [type_name(a) for a in txn.actions[before:]]
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
            args = o["args"]
            if o["op"] in ("drop_table", "drop_view", "rename_table", "rename_view"):
                gone.add((args["identifier"][0], args["identifier"][1]))
            elif o["op"] in ("drop_namespace", "rename_namespace"):
                gone.update((args["namespace"], n) for n in _children(reader, args["namespace"]))
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
