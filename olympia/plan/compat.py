"""Type-compatibility rules: which column changes keep existing data readable."""

from __future__ import annotations

from olympia.catalog.objects import Column

_INT_WIDTH = {"int1": 1, "int2": 2, "int4": 3, "int8": 4}


def is_safe_change(before: Column, after: Column) -> bool:
    """Whether data written with ``before`` stays readable as ``after``: widening integers,
    ``float4`` to ``float8``, more decimal precision at the same scale, longer or unbounded
    ``varchar``, dropping NOT NULL, new nullable struct fields. Comments and properties never
    matter."""
    if before.nullable and not after.nullable:
        return False
    if before.type != after.type and not _widens(before.type, after.type):
        return False
    old_fields = {f.name: f for f in before.fields}
    new_fields = {f.name: f for f in after.fields}
    if set(old_fields) - set(new_fields):
        return False
    for name, new_field in new_fields.items():
        if name in old_fields:
            if not is_safe_change(old_fields[name], new_field):
                return False
        elif not new_field.nullable:
            return False
    for part in ("element", "key", "value"):
        old_part, new_part = getattr(before, part), getattr(after, part)
        if old_part is not None and new_part is not None and not is_safe_change(old_part,
                                                                                 new_part):
            return False
    return True


def _widens(old: str, new: str) -> bool:
    if old in _INT_WIDTH and new in _INT_WIDTH:
        return _INT_WIDTH[new] >= _INT_WIDTH[old]
    if (old, new) == ("float4", "float8"):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p1, s1), (p2, s2) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (old, new))
        return s1 == s2 and p2 >= p1
    if old.startswith("varchar") and new.startswith("varchar"):
        return new == "varchar" or (old != "varchar" and int(new[8:-1]) >= int(old[8:-1]))
    return False
