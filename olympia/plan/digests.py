"""Definitions a plan need not read: those whose bytes the spec determines.

Since ruling 13 a definition file's name carries the digest of its exact bytes, and a
transaction serializes definitions deterministically. So when the digest of the bytes an
apply would write for a declared object equals the digest in the name of that object's
current definition file, the file holds exactly those bytes: a plan takes the definition
from the spec instead of reading it. Anything else is read as before — a file written
before ruling 13 (no digest), an object the spec does not declare under that key, and an
object whose stored definition differs from the declaration: one that changed, a table
whose column ids are no longer numbered from 1 in order (columns removed or updated since
it was created), an Iceberg table with metadata (its definition names the current metadata
file, which every append changes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from google.protobuf.message import Message

from olympia.catalog.keys import ObjectRef, ObjectType, content_digest, def_digest
from olympia.catalog.objects import Column, assign_column_ids
from olympia.spec.model import Spec


def _numbered(columns: Iterable[Column]) -> tuple[Column, ...]:
    """Columns as a create numbers them: 1, 2, ... in declaration order, nested ones
    depth first."""
    return assign_column_ids((c.without_ids() for c in columns), 1)


def declared_definitions(spec: Spec) -> dict[ObjectRef, Message]:
    """The definition the apply of ``spec`` writes when it creates each declared object
    (column ids as the catalog assigns them on create)."""
    out: dict[ObjectRef, Message] = {}
    for name, item in spec.namespaces.items():
        out[ObjectRef(ObjectType.NAMESPACE, name)] = item.namespace.to_proto()
    for (ns, name), t in spec.tables.items():
        out[ObjectRef(ObjectType.TABLE, ns, name)] = replace(
            t.table, columns=_numbered(t.table.columns)).to_proto()
    for (ns, name), v in spec.views.items():
        out[ObjectRef(ObjectType.VIEW, ns, name)] = replace(
            v.view, columns=_numbered(v.view.columns)).to_proto()
    return out


def known_definitions(rows: Iterable[tuple[ObjectRef, str]], spec: Spec,
                      ) -> dict[str, Message]:
    """The definition files among ``rows`` (object, definition path) whose content the
    spec determines: path -> the definition, parsed from the bytes the spec gives (exactly
    what reading the file would return)."""
    declared = declared_definitions(spec)
    out: dict[str, Message] = {}
    for ref, path in rows:
        digest = def_digest(path)
        message = declared.get(ref)
        if digest is None or message is None:
            continue
        content = message.SerializeToString(deterministic=True)
        if content_digest(content) == digest:
            out[path] = type(message).FromString(content)
    return out
