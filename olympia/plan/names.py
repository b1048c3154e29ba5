"""Declared names against the limits of one catalog (the spec loader knows only the format's
default ones)."""

from __future__ import annotations

from typing import Any

from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.reader import CatalogReader
from olympia.exceptions import InvalidNameError, SpecError
from olympia.spec.model import Key, Spec
from olympia.spec.yamlpos import Problem


def check_names(reader: CatalogReader, spec: Spec) -> None:
    """Every declared name fits this catalog's name limits (the loader knows only the
    format's default ones)."""
    problems = []
    items: list[tuple[ObjectRef, Any]] = [
        (ObjectRef(ObjectType.NAMESPACE, n), s) for n, s in spec.namespaces.items()]
    items += [(ObjectRef(ObjectType.TABLE, *k), s) for k, s in spec.tables.items()]
    items += [(ObjectRef(ObjectType.VIEW, *k), s) for k, s in spec.views.items()]
    for ref, item in items:
        try:
            reader.codec.key(ref)
        except InvalidNameError as exc:
            problems.append(Problem(item.position, str(exc)))
    for ref_ns, ref_name in spec.external_references():
        try:
            reader.codec.key(ObjectRef(ObjectType.TABLE, ref_ns, ref_name))
        except InvalidNameError as exc:
            problems.append(Problem(_reference_position(spec, (ref_ns, ref_name)), str(exc)))
    if problems:
        raise SpecError([str(p) for p in sorted(problems)])


def _reference_position(spec: Spec, ref: Key) -> Any:
    return next(where for v in spec.views.values()
                for r, where in zip(v.view.referenced_objects, v.reference_positions,
                                    strict=True) if r == ref)
