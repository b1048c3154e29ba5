"""Plans: what applying a spec would change, bound to the catalog state it was computed on."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olympia.catalog.catalog import Catalog
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import (
    DestructiveChangeError,
    InvalidArgumentError,
    ProtectedObjectError,
    StalePlanError,
)
from olympia.plan.diff import Change, compute_changes, managed_namespaces
from olympia.spec.model import Spec

PLAN_FORMAT = "olympia-plan"
PLAN_FORMAT_VERSION = 1
SIGNS = {"create": "+", "update": "~", "rename": "~", "replace": "-/+", "drop": "-"}
COLORS = {"create": "green", "update": "yellow", "rename": "yellow", "replace": "magenta",
          "drop": "red"}

Progress = Callable[[int, int, Change], None]


def fingerprint(reader: CatalogReader, namespaces: list[str]) -> str:
    """A digest of the managed objects' keys and definition paths (paths change with every
    change, so equal digests mean nothing managed changed)."""
    digest = hashlib.sha256()
    for ns in namespaces:
        digest.update(f"ns\0{ns}\0".encode())
        for key, path in reader.object_paths(ns):
            digest.update(f"{key}\0{path}\0".encode())
    return digest.hexdigest()


@dataclass
class Plan:
    """Ordered changes plus what they were computed against."""

    catalog_uri: str
    catalog_id: str
    base_version: int
    managed: list[str]
    fingerprint: str
    spec_digest: str
    changes: list[Change] = field(default_factory=list)

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    @property
    def destructive(self) -> bool:
        return any(c.destructive for c in self.changes)

    @property
    def blocked(self) -> list[Change]:
        return [c for c in self.changes if c.blocked]

    def summary(self) -> dict[str, int]:
        counts = {a: 0 for a in ("create", "update", "rename", "replace", "drop")}
        for change in self.changes:
            counts[change.action] += 1
        counts["destructive"] = sum(c.destructive for c in self.changes)
        return counts

    def summary_line(self) -> str:
        if not self.changes:
            return "No changes. The catalog matches the spec."
        s = self.summary()
        line = (f"Plan: {s['create']} to create, {s['update'] + s['rename']} to change, "
                f"{s['replace']} to replace, {s['drop']} to drop")
        if s["destructive"]:
            line += f" ({s['destructive']} destructive)"
        return line + "."

    def render_text(self, color: bool | None = None) -> str:
        """Terraform-style text: ``+`` create, ``~`` change, ``-/+`` replace, ``-`` drop."""
        use_color = _want_color() if color is None else color
        lines = [f"Olympia plan for {self.catalog_uri} (version {self.base_version})", ""]
        for change in self.changes:
            sign = SIGNS[change.action]
            head = f"{sign} {change.kind} {change.name}"
            if change.from_name:
                head += f" (renamed from {change.from_name})"
            if change.destructive:
                head += "  [destructive]"
            lines.append(_paint(f"  {head}", COLORS[change.action], use_color))
            if change.blocked:
                lines.append(_paint(f"      ! refused: {change.blocked}", "red", use_color))
            for d in change.details:
                lines.append("      " + _detail_text(d))
        if self.changes:
            lines.append("")
        lines.append(_paint(self.summary_line(), "bold", use_color))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT, "format_version": PLAN_FORMAT_VERSION,
            "catalog": {"uri": self.catalog_uri, "id": self.catalog_id},
            "base_version": self.base_version, "managed_namespaces": self.managed,
            "fingerprint": self.fingerprint, "spec_digest": self.spec_digest,
            "has_changes": self.has_changes, "destructive": self.destructive,
            "summary": self.summary(), "changes": [c.to_dict() for c in self.changes],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidArgumentError(f"{path}: not a readable plan file ({exc})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "plan") -> Plan:
        if data.get("format") != PLAN_FORMAT or data.get("format_version") != PLAN_FORMAT_VERSION:
            raise InvalidArgumentError(
                f"{where}: not an {PLAN_FORMAT} file of version {PLAN_FORMAT_VERSION}")
        return cls(data["catalog"]["uri"], data["catalog"]["id"], data["base_version"],
                   list(data["managed_namespaces"]), data["fingerprint"], data["spec_digest"],
                   [Change.from_dict(c) for c in data["changes"]])


def _want_color() -> bool:
    return "NO_COLOR" not in os.environ and sys.stdout.isatty()


def _paint(text: str, color: str, enabled: bool) -> str:
    if not enabled:
        return text
    codes = {"green": "32", "yellow": "33", "red": "31", "magenta": "35", "bold": "1"}
    return f"\033[{codes[color]}m{text}\033[0m"


class _Raw(str):
    """A detail value shown as is."""


def _show(value: Any) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if value is None:
        return "(none)"
    if isinstance(value, str) and "\n" in value:
        return json.dumps(value)
    return json.dumps(value) if isinstance(value, str | bool) else str(value)


def _detail_text(detail: Mapping[str, Any]) -> str:
    attr, before, after = detail["attr"], detail.get("before"), detail.get("after")
    if attr.startswith("column "):  # column types read better unquoted
        before = before if before is None else _Raw(before)
        after = after if after is None else _Raw(after)
    flag = "  [incompatible]" if detail.get("incompatible") else ""
    if before is None:
        return f"+ {attr}: {_show(after)}"
    if after is None:
        return f"- {attr}: {_show(before)}"
    return f"~ {attr}: {_show(before)} -> {_show(after)}{flag}"


def make_plan(catalog: Catalog, spec: Spec) -> Plan:
    """Compare ``spec`` with the latest version of ``catalog``."""
    catalog.refresh()
    snapshot = catalog.snapshot
    managed = managed_namespaces(snapshot, spec)
    return Plan(catalog.uri, catalog.catalog_def.id, snapshot.version, managed,
                fingerprint(snapshot, managed), spec.digest, compute_changes(snapshot, spec))


@dataclass
class ApplyResult:
    version: int
    changes: list[dict[str, Any]]
    changed_objects: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "changes": self.changes,
                "changed_objects": self.changed_objects}


def apply_plan(catalog: Catalog, plan: Plan, *, allow_destructive: bool = False,
               info: Mapping[str, str] | None = None,
               progress: Progress | None = None) -> ApplyResult:
    """Apply every change of ``plan`` in ONE transaction (one new version, or nothing)."""
    if plan.catalog_id != catalog.catalog_def.id:
        raise StalePlanError(f"the plan was made for another catalog ({plan.catalog_uri}, "
                             f"id {plan.catalog_id}), not {catalog.uri}")
    if plan.blocked:
        raise ProtectedObjectError("the plan drops protected objects:\n" + "\n".join(
            f"  {c.kind} {c.name}: {c.blocked}" for c in plan.blocked))
    if plan.destructive and not allow_destructive:
        raise DestructiveChangeError(
            "the plan has destructive changes; re-run with --allow-destructive "
            "(allow_destructive=True) to apply them:\n" + "\n".join(
                f"  {SIGNS[c.action]} {c.kind} {c.name}" for c in plan.changes if c.destructive))
    if not plan.has_changes:
        return ApplyResult(catalog.refresh(), [], [])
    txn = catalog.transaction()
    now = fingerprint(txn.base, plan.managed)
    if now != plan.fingerprint:
        raise StalePlanError(
            f"plan is stale, re-plan: objects it manages changed since version "
            f"{plan.base_version} (the catalog is at version {txn.base.version})")
    for i, change in enumerate(plan.changes, 1):
        for op in change.ops:
            args = dict(op["args"])
            if "identifier" in args:
                args["identifier"] = tuple(args["identifier"])
            getattr(txn, op["op"])(**args)
        if progress is not None:
            progress(i, len(plan.changes), change)
    txn.annotate(tool="olympia apply", spec_digest=plan.spec_digest,
                 plan_base_version=str(plan.base_version), **dict(info or {}))
    version = txn.commit()
    return ApplyResult(
        version, [{"action": c.action, "type": c.kind, "name": c.name} for c in plan.changes],
        sorted({c.name for c in plan.changes} | {c.from_name for c in plan.changes
                                                 if c.from_name}))
