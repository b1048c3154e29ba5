"""Safety of a plan, derived from its operations alone.

Staging a change here first checks that every operation stays inside the namespaces the plan
manages, then judges each operation against the objects as staged by the operations before
it — drops, column removals, incompatible type changes and removals of protection are
destructive; drops of protected objects (and of namespaces holding them, and of objects whose
protection the plan itself removed) are blocked — and stages it unless it is blocked.
Plans are classified this way when they are made and again when they are applied, so
nothing a saved plan says about itself is trusted.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from olympia.catalog.actions import type_name
from olympia.catalog.objects import View
from olympia.catalog.transaction import Transaction
from olympia.exceptions import InvalidArgumentError, NotFoundError
from olympia.plan.changes import Change, column_text
from olympia.plan.compat import is_safe_change
from olympia.plan.ops import (
    AlterNamespace,
    CreateIcebergTable,
    CreateTable,
    CreateView,
    DropNamespace,
    DropTable,
    DropView,
    Ident,
    Op,
    RenameNamespace,
    RenameTable,
    RenameView,
    ReplaceView,
    TableChanges,
)

UNPROTECT = "removes protection"


def protected_text(kind: str, name: str) -> str:
    return (f"{kind} {name} is protected in the catalog; to drop it, first apply a spec that "
            "sets protected: false")


class Gate:
    """Stages changes in ``txn`` with their safety re-derived from their operations.

    ``managed``: the namespaces the plan manages, computed from its scope against the catalog.
    """

    def __init__(self, txn: Transaction, managed: Collection[str]) -> None:
        self.txn = txn
        self.managed = frozenset(managed)
        # objects, (ns,) or (ns, name), whose protection this plan removed: still protected
        # for its drops
        self.unprotected: set[tuple[str, ...]] = set()

    def check_scope(self, change: Change) -> None:
        """Refuse operations on namespaces the plan does not manage."""
        for op in change.ops:
            for ns in op.namespaces():
                if ns not in self.managed:
                    shown = ", ".join(sorted(self.managed)[:10]) or "none"
                    raise InvalidArgumentError(
                        f"{change}: operation {op.op} changes namespace {ns}, which the plan "
                        f"does not manage (it manages: {shown}); re-plan")

    def classify(self, change: Change) -> None:
        """Set ``change.reasons`` and ``change.blocked`` from its operations, staging
        nothing (each operation is judged against the catalog as staged so far)."""
        self._run(change, stage=False)

    def stage(self, change: Change) -> None:
        """Check, classify and stage ``change`` one operation at a time, each judged against
        the catalog as staged so far; once an operation is refused, nothing more of the
        change is staged. A failing operation raises its error with the transaction partly
        staged (the caller aborts it)."""
        self.check_scope(change)
        self._run(change, stage=True)

    def _run(self, change: Change, stage: bool) -> None:
        reasons: list[str] = []
        blocked: list[str] = []
        before = len(self.txn.actions)
        for i, op in enumerate(change.ops):
            self._assess(op, change.ops[i + 1:], reasons, blocked)
            if stage and not blocked:
                op.apply(self.txn)
                self._follow(op)
        change.reasons = reasons
        change.blocked = "; ".join(blocked)
        if stage and not blocked:
            change.actions = [type_name(a) for a in self.txn.actions[before:]]
        else:  # what the catalog would record
            change.actions = [op.action_type for op in change.ops]

    def _assess(self, op: Op, later: list[Op], reasons: list[str],
                blocked: list[str]) -> None:
        """Add why ``op`` is destructive to ``reasons``, and why it is refused to
        ``blocked``."""
        match op:
            case DropTable() | DropView():
                kind = "table" if isinstance(op, DropTable) else "view"
                name = _name(op.identifier)
                again = any(isinstance(o, CreateTable | CreateIcebergTable | CreateView)
                            and o.identifier == op.identifier for o in later)
                reasons.append(f"drops {kind} {name}" + (" and creates it anew"
                                                         if again else ""))
                if self._protected(kind, op.identifier):
                    blocked.append(protected_text(kind, name))
            case DropNamespace():
                reasons.append(f"drops namespace {op.namespace}")
                blocked += self._namespace_drop(op.namespace)
            case AlterNamespace(protected=False):
                if self._staged("namespace", (op.namespace,)):
                    reasons.append(UNPROTECT)
                    self.unprotected.add((op.namespace,))
            case TableChanges():
                reasons += self._alter_table(op)
            case ReplaceView(definition=View(protected=False)):
                if self._staged("view", op.identifier):
                    reasons.append(UNPROTECT)
                    self.unprotected.add(op.identifier)

    # --- helpers ------------------------------------------------------------------------

    def _staged(self, kind: str, key: tuple[str, ...]) -> bool:
        """The object's protected flag as staged so far; False when it does not exist
        (staging then fails with the catalog's own error)."""
        try:
            if kind == "namespace":
                return self.txn.load_namespace(key[0]).protected
            if kind == "table":
                return self.txn.load_table((key[0], key[1])).protected
            return self.txn.load_view((key[0], key[1])).protected
        except NotFoundError:
            return False

    def _protected(self, kind: str, key: tuple[str, ...]) -> bool:
        """Protected now, or before this plan removed the protection."""
        return key in self.unprotected or self._staged(kind, key)

    def _namespace_drop(self, namespace: str) -> list[str]:
        if self._protected("namespace", (namespace,)):
            return [protected_text("namespace", namespace)]
        if not self.txn.namespace_exists(namespace):
            return []
        inside = [("table", (namespace, t)) for t in self.txn.list_tables(namespace)]
        inside += [("view", (namespace, v)) for v in self.txn.list_views(namespace)]
        if any(self._protected(kind, key) for kind, key in inside):
            return [f"namespace {namespace} holds protected objects"]
        return []

    def _alter_table(self, op: TableChanges) -> list[str]:
        try:
            table = self.txn.load_table(op.identifier)
        except NotFoundError:
            return []
        reasons = []
        if op.protected is False and table.protected:
            reasons.append(UNPROTECT)
            self.unprotected.add(op.identifier)
        current = {c.name: c.without_ids() for c in table.columns}
        reasons += [f"removes column {n}" for n in op.remove_columns if n in current]
        old_names = {new: old for old, new in op.rename_columns.items()}
        for name, after in op.update_columns.items():
            before = current.get(old_names.get(name, name))
            if before is None:
                continue
            before = replace(before, name=name)
            if not is_safe_change(before, after):
                reasons.append(f"changes column {name} incompatibly "
                               f"({column_text(before)} -> {column_text(after)})")
        return reasons

    def _follow(self, op: Op) -> None:
        """Keep ``unprotected`` pointing at the objects' names after renames."""
        match op:
            case RenameTable() | RenameView():
                if op.identifier in self.unprotected:
                    self.unprotected.add((op.identifier[0], op.new_name))
            case RenameNamespace():
                self.unprotected |= {(op.new_name, *key[1:]) for key in self.unprotected
                                     if key[0] == op.namespace}


def _name(key: Ident) -> str:
    return f"{key[0]}.{key[1]}"

