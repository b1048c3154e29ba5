"""One planned change: what happens to one object, why, and the transaction calls that do it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from olympia.catalog.objects import Column
from olympia.catalog.transaction import Transaction
from olympia.exceptions import InvalidArgumentError

VERBS = ("create", "update", "rename", "replace", "drop")
KINDS = ("namespace", "table", "view")
# transaction calls a plan may hold, and the action each one records when it cannot be staged
OPS = {
    "create_namespace": "NAMESPACE_CREATE", "alter_namespace": "NAMESPACE_ALTER",
    "rename_namespace": "NAMESPACE_RENAME", "drop_namespace": "NAMESPACE_DROP",
    "create_table": "TABLE_CREATE", "alter_table": "TABLE_ALTER",
    "rename_table": "TABLE_RENAME", "drop_table": "TABLE_DROP",
    "create_view": "VIEW_CREATE", "replace_view": "VIEW_REPLACE",
    "rename_view": "VIEW_RENAME", "drop_view": "VIEW_DROP",
}


@dataclass
class Change:
    """A planned change of one object.

    ``ops`` are the Transaction calls that make it (JSON-able, so a saved plan applies
    exactly what was reviewed); ``actions`` the action types the transaction records for
    them (found by staging the plan when it was made).
    """

    action: str  # create | update | rename | replace | drop
    kind: str  # namespace | table | view
    name: str  # "ns" or "ns.name", after the change
    from_name: str = ""  # renames, and replacements of another kind
    details: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why it is destructive
    blocked: str = ""  # why it may not be applied (protected objects)
    source: str = ""  # file:line:col of the declaration

    @property
    def destructive(self) -> bool:
        return bool(self.reasons)

    def __str__(self) -> str:
        return f"{self.action} {self.kind} {self.name}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "type": self.kind, "name": self.name,
                               "destructive": self.destructive, "reasons": self.reasons,
                               "details": self.details, "actions": self.actions,
                               "ops": self.ops}
        for key in ("from_name", "blocked", "source"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Change:
        action, kind = data["action"], data["type"]
        if action not in VERBS or kind not in KINDS:
            raise InvalidArgumentError(f"unknown change {action!r} of {kind!r}")
        ops = [dict(op) for op in data.get("ops", [])]
        for op in ops:
            if op.get("op") not in OPS or not isinstance(op.get("args"), dict):
                raise InvalidArgumentError(f"unknown operation {op.get('op')!r}")
        return cls(action, kind, data["name"], data.get("from_name", ""),
                   list(data.get("details", [])), ops, list(data.get("actions", [])),
                   list(data.get("reasons", [])), data.get("blocked", ""),
                   data.get("source", ""))

    def run(self, txn: Transaction) -> None:
        """Stage this change's operations in ``txn``."""
        for op in self.ops:
            args = dict(op["args"])
            if "identifier" in args:
                args["identifier"] = tuple(args["identifier"])
            getattr(txn, op["op"])(**args)


def op(name: str, **args: Any) -> dict[str, Any]:
    return {"op": name, "args": args}


def detail(attr: str, before: Any, after: Any, **flags: Any) -> dict[str, Any]:
    """An attribute's change; ``before`` None = added, ``after`` None = removed. Flags:
    ``text`` (shown unquoted: type texts), ``rename``, ``incompatible``."""
    return {"attr": attr, "before": before, "after": after, **flags}


def column_text(col: Column) -> str:
    """``list<struct<sku: varchar not null, qty: int4>>`` style type text."""
    text = col.type
    if col.fields:
        text += "<" + ", ".join(f"{f.name}: {column_text(f)}" for f in col.fields) + ">"
    if col.element is not None:
        text += f"<{column_text(col.element)}>"
    if col.key is not None and col.value is not None:
        text += f"<{column_text(col.key)}, {column_text(col.value)}>"
    return text + ("" if col.nullable else " not null")


def property_details(before: Mapping[str, str], after: Mapping[str, str],
                     prefix: str = "properties") -> list[dict[str, Any]]:
    keys = sorted(set(before) | set(after))
    return [detail(f"{prefix}.{k}", before.get(k), after.get(k)) for k in keys
            if before.get(k) != after.get(k)]
