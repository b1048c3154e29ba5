"""Apply a plan as ONE catalog transaction: one new version, or nothing at all.

A plan (saved ones especially) is checked again at apply time against the catalog as it is
then: same catalog, nothing it manages changed, every operation inside the namespaces it
manages, and its destructive and refused changes re-derived from its operations
(:mod:`olympia.plan.gate`) — nothing the plan says about itself is trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from olympia.catalog import actions as catalog_actions
from olympia.catalog.catalog import Catalog
from olympia.exceptions import (
    DestructiveChangeError,
    OlympiaError,
    ProtectedDropError,
    StalePlanError,
)
from olympia.plan.changes import Change
from olympia.plan.gate import Gate
from olympia.plan.ops import stage_iceberg
from olympia.plan.plan import Plan
from olympia.plan.render import SIGNS
from olympia.plan.state import Observed

Progress = Callable[[int, int, Change], None]


@dataclass
class ApplyResult:
    """What an apply did: the new version (or the unchanged one when there was nothing to
    do), the changes (action, type, name) and every object touched (``ns`` / ``ns.name``)."""

    version: int
    changes: list[dict[str, Any]] = field(default_factory=list)
    changed_objects: list[str] = field(default_factory=list)
    base_version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "base_version": self.base_version,
                "changes": self.changes, "changed_objects": self.changed_objects}


def apply_plan(catalog: Catalog, plan: Plan, *, allow_destructive: bool = False,
               info: Mapping[str, str] | None = None,
               progress: Progress | None = None) -> ApplyResult:
    """Apply every change of ``plan`` to the latest version of ``catalog`` in one transaction.

    Whether a change is destructive or refused is derived again from its operations against
    the catalog (every change's ``reasons`` and ``blocked`` are overwritten).

    Raises:
        StalePlanError: the plan was made for another catalog, or an object it manages
            changed since its base version (changes to other objects do not matter: the plan
            then applies on the new latest version).
        InvalidArgumentError: an operation changes a namespace the plan does not manage.
        ProtectedDropError: the plan drops protected objects.
        DestructiveChangeError: it is destructive and ``allow_destructive`` is false.

    ``info`` is recorded with the version, next to the spec digest and the plan's git commit
    (which a ``git_commit`` in ``info`` overrides). ``progress(done, total, change)`` is
    called after each change is staged.
    """
    _check_catalog(catalog, plan)
    if not plan.has_changes:
        version = catalog.refresh()
        return ApplyResult(version, base_version=version)
    # SERIALIZABLE: a commit racing this one that touches what the check below read (the
    # managed namespaces' objects) makes the commit fail instead of applying a stale plan.
    txn = catalog.transaction(isolation="SERIALIZABLE")
    stage_iceberg(txn, catalog, dry_run=False)
    try:
        _stage_all(plan, txn, progress)
        check_allowed(plan, allow_destructive)
        commit = {"git_commit": plan.git_commit} if plan.git_commit else {}
        txn.annotate(**{"tool": "olympia apply", "spec_digest": plan.spec_digest,
                        "plan_base_version": str(plan.base_version), **commit,
                        **dict(info or {})})
        touched = _touched(txn.actions)
        version = txn.commit()
    except BaseException:
        txn.abort()
        raise
    changes = [{"action": str(c.action), "type": str(c.kind), "name": c.name}
               | ({"from_name": c.from_name} if c.from_name else {}) for c in plan.changes]
    return ApplyResult(version, changes, touched, txn.base.version)


def review(catalog: Catalog, plan: Plan) -> None:
    """Check ``plan`` against the latest version of ``catalog`` as :func:`apply_plan` would,
    classifying its changes, without writing anything (to show a saved plan before asking).

    Raises:
        StalePlanError, InvalidArgumentError: as :func:`apply_plan`.
    """
    _check_catalog(catalog, plan)
    if not plan.has_changes:
        return
    txn = catalog.transaction()
    stage_iceberg(txn, catalog, dry_run=True)  # Iceberg operations write no metadata file
    try:
        _stage_all(plan, txn, None)
    finally:
        txn.abort()


def _check_catalog(catalog: Catalog, plan: Plan) -> None:
    if plan.catalog_id != catalog.catalog_def.id:
        raise StalePlanError(f"the plan was made for another catalog ({plan.catalog_uri}, id "
                             f"{plan.catalog_id}), not {catalog.uri}")


def _stage_all(plan: Plan, txn: Any, progress: Progress | None) -> None:
    """Check freshness and scope, then stage and classify every change. A change failing
    after a refused one was skipped reports the refusal (the check that follows)."""
    gate = Gate(txn, _check_fresh(plan, txn).managed)
    total = len(plan.changes)
    for change in plan.changes:
        gate.check_scope(change)
    for done, change in enumerate(plan.changes, 1):
        try:
            gate.stage(change)
        except OlympiaError:
            if plan.blocked:
                return
            raise
        if progress is not None:
            progress(done, total, change)


class Classified(Protocol):
    """Changes classified by the gate: a plan, or a rollback's changes."""

    @property
    def changes(self) -> Sequence[Change]: ...

    @property
    def blocked(self) -> list[Change]: ...

    @property
    def destructive(self) -> bool: ...


def check_allowed(plan: Classified, allow_destructive: bool, what: str = "plan",
                  command: str = "apply") -> None:
    """Refuse protected drops always, and destructive changes unless allowed (from the
    classification the changes got when staged).

    Raises:
        ProtectedDropError: some change is refused whatever the options.
        DestructiveChangeError: some change is destructive and ``allow_destructive`` is false.
    """
    if plan.blocked:
        raise ProtectedDropError(f"the {what} drops objects protected in the catalog:\n"
                                 + "\n".join(f"  {c.kind} {c.name}: {c.blocked}"
                                             for c in plan.blocked))
    if plan.destructive and not allow_destructive:
        raise DestructiveChangeError(
            f"the {what} has destructive changes; {command} with --allow-destructive "
            "(allow_destructive=True) to make them:\n" + "\n".join(
                f"  {SIGNS[c.action]} {c.kind} {c.name}: {'; '.join(c.reasons)}"
                for c in plan.changes if c.destructive))


def _check_fresh(plan: Plan, txn: Any) -> Observed:
    observed = plan.scope.observe(txn)
    now = observed.fingerprints()
    changed = sorted(ns for ns in set(now) | set(plan.fingerprints)
                     if now.get(ns) != plan.fingerprints.get(ns))
    if not changed:
        return observed
    raise StalePlanError(
        f"plan is stale, re-plan: what it manages changed since its base version "
        f"{plan.base_version} (the catalog is at version {txn.base.version}): "
        + ", ".join(_what_changed(ns, plan.fingerprints, now) for ns in changed))


def _what_changed(ns: str, before: Mapping[str, str], now: Mapping[str, str]) -> str:
    if ns == "":
        return "objects its views read outside the spec"
    if ns not in before:
        return f"namespace {ns} (now matched by a manage pattern)"
    if ns not in now:
        return f"namespace {ns} (no longer matched by a manage pattern)"
    return f"namespace {ns}"


def _touched(recorded: list[Any]) -> list[str]:
    """Every object an action list changes, by name (old and new names of renames)."""
    names = set()
    for action in recorded:
        for ref in (catalog_actions.ref_of(action), catalog_actions.renamed_ref(action)):
            if ref is not None:
                names.add(str(ref))
    return sorted(names)
