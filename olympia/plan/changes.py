"""One planned change: what happens to one object, why, and the transaction calls that do it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from olympia.catalog.keys import ObjectType
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.exceptions import InvalidArgumentError
from olympia.plan.compat import is_safe_change
from olympia.plan.opjson import parse_ops
from olympia.plan.ops import Action, Kind, Op
from olympia.spec import fields as described

if TYPE_CHECKING:
    from olympia.catalog.transaction import Transaction


@dataclass
class Change:
    """A planned change of one object.

    ``ops`` are the typed Transaction calls that make it (saved with the plan, so a saved
    plan applies exactly what was reviewed); ``actions`` the action types the transaction
    records for them. ``reasons`` (why it is destructive) and ``blocked`` (why it may not be
    applied) are derived from the operations against the catalog when the plan is staged
    (:mod:`olympia.plan.gate`), never read from a saved plan.
    """

    action: Action
    kind: Kind
    name: str  # "ns" or "ns.name", after the change
    from_name: str = ""  # renames, and replacements of another kind
    details: list[dict[str, Any]] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    blocked: str = ""
    source: str = ""  # file:line:col of the declaration

    def __post_init__(self) -> None:
        self.action, self.kind = Action(self.action), Kind(self.kind)

    @property
    def destructive(self) -> bool:
        return bool(self.reasons)

    def __str__(self) -> str:
        return f"{self.action} {self.kind} {self.name}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": str(self.action), "type": str(self.kind),
                               "name": self.name, "destructive": self.destructive,
                               "reasons": self.reasons, "details": self.details,
                               "actions": self.actions,
                               "ops": [o.to_dict() for o in self.ops]}
        for key in ("from_name", "blocked", "source"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Change:
        """A change as saved; its operations are validated, its classification (reasons,
        blocked) is not read: it is re-derived when the plan is staged.

        Raises:
            InvalidArgumentError: the change or one of its operations is malformed.
        """
        if not isinstance(data, Mapping):
            raise InvalidArgumentError("a change must be an object")
        action, kind, name = data.get("action"), data.get("type"), data.get("name")
        if action not in set(Action) or kind not in set(Kind) or not isinstance(name, str):
            raise InvalidArgumentError(f"unknown change {action!r} of {kind!r}")
        where = f"{action} {kind} {name}"
        details, actions = data.get("details", []), data.get("actions", [])
        if not (_valid_details(details) and isinstance(actions, list)
                and all(isinstance(a, str) for a in actions)):
            raise InvalidArgumentError(f"{where}: details and actions must be lists")
        try:
            ops = parse_ops(data.get("ops", []))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None
        return cls(Action(action), Kind(kind), name, str(data.get("from_name", "")),
                   list(details), ops, list(actions), source=str(data.get("source", "")))

    def run(self, txn: Transaction) -> None:
        """Stage this change's operations in ``txn``."""
        for op in self.ops:
            op.apply(txn)


def _valid_details(details: Any, depth: int = 0) -> bool:
    """Whether saved details are a list of objects with an ``attr`` text, ``nested`` ones
    the same (at most 64 levels deep)."""
    return depth <= 64 and isinstance(details, list) and all(
        isinstance(d, dict) and isinstance(d.get("attr"), str)
        and ("nested" not in d or _valid_details(d["nested"], depth + 1)) for d in details)


def detail(attr: str, before: Any, after: Any, **flags: Any) -> dict[str, Any]:
    """An attribute's change; ``before`` None = added, ``after`` None = removed. Flags:
    ``text`` (shown unquoted: type texts), ``rename``, ``incompatible``, ``nested`` (the
    details inside a struct, list or map column, or a new column's comment and properties)."""
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


def value_names(kind: ObjectType) -> tuple[str, ...]:
    """The plain-valued fields of ``kind``, common ones (comment, protection) first."""
    return tuple(f.name for f in described.values(kind))


def map_details(before: Namespace | Table | View, after: Namespace | Table | View,
                ) -> list[dict[str, Any]]:
    """The entries of the map fields (properties first) that differ, as details."""
    return [d for f in described.maps(described.kind_of(after))
            for d in property_details(f.value(before), f.value(after), f.name)]


def new_field_values(before: Namespace | Table, after: Namespace | Table,
                     settable: Iterable[described.Field],
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The fields among ``settable`` whose value differs: their new values (normalised) for
    an alteration's ``new_values``, and their details (map fields key by key)."""
    values: dict[str, Any] = {}
    details: list[dict[str, Any]] = []
    for f in settable:
        old, new = f.normal(f.value(before)), f.normal(f.value(after))
        if old == new:
            continue
        values[f.name] = new
        details += (property_details(old, new, f.name) if f.compare == described.Compare.MAP
                    else [detail(f.name, old, new)])
    return values, details


def new_attributes(default: Any, new: Any, attrs: tuple[str, ...]) -> list[dict[str, Any]]:
    """Attributes of a new object that differ from the defaults, shown as additions."""
    return [detail(a, None, getattr(new, a)) for a in attrs
            if getattr(default, a) != getattr(new, a)]


def attribute_details(before: Any, after: Any, attrs: tuple[str, ...]) -> list[dict[str, Any]]:
    """The attributes ``attrs`` that differ between two objects, as before/after details."""
    return [detail(a, getattr(before, a), getattr(after, a)) for a in attrs
            if getattr(before, a) != getattr(after, a)]


def column_details(before: Column, after: Column, attr: str = "",
                   ) -> list[dict[str, Any]]:
    """How one column (``attr``: ``column NAME`` by default) changes: its type, flagged
    ``incompatible`` when existing data would not read as the new type; when both are the
    same struct, list or map, a ``nested`` list of the inner changes instead of two whole
    type texts (fields added, removed, retyped, recursively); then its comment and
    properties."""
    attr = attr or f"column {after.name}"
    out = []
    inner = _inner_details(before, after)
    if inner or column_text(before) != column_text(after):
        out.append(detail(attr, column_text(before), column_text(after), text=True,
                          **({"nested": inner} if inner else {})))
        if not is_safe_change(before, after):
            out[0]["incompatible"] = True
    if before.comment != after.comment:
        out.append(detail(f"{attr} comment", before.comment, after.comment))
    out += property_details(before.properties, after.properties, f"{attr} properties")
    return out


def added_column(attr: str, col: Column) -> dict[str, Any]:
    """A new column (or field): its type text, and its comment and properties (and those of
    its fields) as ``nested`` lines."""
    about = _descriptions(col)
    return detail(attr, None, column_text(col), text=True, **({"nested": about} if about else {}))


def _descriptions(col: Column) -> list[dict[str, Any]]:
    out = [detail("comment", None, col.comment)] if col.comment else []
    out += property_details({}, col.properties)
    out += [added_column(_part_name(col, child), child) for child in col.children()
            if any(c.comment or c.properties for c in child.walk())]
    return out


def _part_name(col: Column, child: Column) -> str:
    """A field's name; ``element``, ``key``, ``value`` for the parts of lists and maps."""
    return child.name if col.type == "struct" else next(
        p for p in ("element", "key", "value") if getattr(col, p) is child)


def _inner_details(before: Column, after: Column) -> list[dict[str, Any]]:
    """The changes inside two columns of the same struct, list or map type: nullability,
    fields removed, added and changed (by name, in the new order), field order, and the
    parts of lists and maps. Empty for other types."""
    if before.type != after.type or before.type not in ("struct", "list", "map"):
        return []
    out = []
    if before.nullable != after.nullable:
        out.append(detail("nullable", before.nullable, after.nullable,
                          **({} if after.nullable else {"incompatible": True})))
    old = {f.name: f for f in before.fields}
    new = {f.name: f for f in after.fields}
    out += [detail(n, column_text(f), None, text=True, incompatible=True)
            for n, f in old.items() if n not in new]
    for name, sub in new.items():
        if name not in old:
            out.append(added_column(name, sub))
            if not sub.nullable:
                out[-1]["incompatible"] = True
        elif old[name] != sub:
            out += column_details(old[name], sub, name)
    kept = [n for n in old if n in new]
    if kept != [n for n in new if n in old]:
        out.append(detail("field order", [n for n in old], [n for n in new]))
    for part in ("element", "key", "value"):
        was, now = getattr(before, part), getattr(after, part)
        if was is not None and now is not None and was != now:
            out += column_details(was, now, part)
    return out


def alter_common(before: Namespace | Table, after: Namespace | Table,
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Property, comment and protection changes shared by namespaces and tables: the alter
    arguments (only what changes) and the details."""
    args: dict[str, Any] = {}
    set_props = {k: v for k, v in sorted(after.properties.items())
                 if before.properties.get(k) != v}
    unset = sorted(set(before.properties) - set(after.properties))
    if set_props:
        args["set_properties"] = set_props
    if unset:
        args["unset_properties"] = tuple(unset)
    details = property_details(before.properties, after.properties)
    common = tuple(f.name for f in described.values(described.kind_of(after)) if f.common)
    details += attribute_details(before, after, common)
    args.update((name, getattr(after, name)) for name in common
                if getattr(before, name) != getattr(after, name))
    return args, details


class ChangeSet:
    """Questions asked of a list of changes (plans and rollback previews alike)."""

    changes: list[Change]

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
        """Changes counted per action, plus the destructive and blocked ones."""
        counts = {str(verb): 0 for verb in Action}
        for change in self.changes:
            counts[change.action] += 1
        counts["destructive"] = sum(c.destructive for c in self.changes)
        counts["blocked"] = len(self.blocked)
        return counts
