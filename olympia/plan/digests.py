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

from google.protobuf.message import Message

from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import ObjectRef, ObjectType, content_digest, def_digest
from olympia.spec.model import Spec


def _number_columns(schema: pb.Schema) -> None:
    """Number the columns of ``schema`` as a create does (1, 2, ... in declaration order,
    nested ones depth first, as :func:`olympia.catalog.objects.assign_column_ids`); on the
    message rather than the Column values, as this runs for every declared object."""
    next_id = 1

    def number(column: pb.Column) -> None:
        nonlocal next_id
        column.id = next_id
        next_id += 1
        for field in column.struct_fields:
            number(field)
        for part in ("list_element", "map_key", "map_value"):
            if column.HasField(part):
                number(getattr(column, part))

    for column in schema.columns:
        number(column)


def declared_definition(spec: Spec, ref: ObjectRef) -> Message | None:
    """The definition the apply of ``spec`` writes when it creates ``ref`` (column ids as
    the catalog assigns them on create), or None when the spec does not declare it."""
    message: pb.TableDef | pb.ViewDef
    if ref.type == ObjectType.NAMESPACE:
        declared = spec.namespaces.get(ref.namespace)
        return None if declared is None else declared.namespace.to_proto()
    if ref.type == ObjectType.TABLE:
        table = spec.tables.get((ref.namespace, ref.name))
        if table is None:
            return None
        message = table.table.to_proto()
    elif ref.type == ObjectType.VIEW:
        view = spec.views.get((ref.namespace, ref.name))
        if view is None:
            return None
        message = view.view.to_proto()
    else:
        return None
    _number_columns(message.schema)
    return message


def known_definitions(rows: Iterable[tuple[ObjectRef, str]], spec: Spec,
                      ) -> dict[str, Message]:
    """The definition files among ``rows`` (object, definition path) whose content the
    spec determines: path -> the definition the spec gives (equal to what reading the file
    would return, as its bytes are the file's)."""
    out: dict[str, Message] = {}
    for ref, path in rows:
        digest = def_digest(path)
        message = None if digest is None else declared_definition(spec, ref)
        if message is None:
            continue
        if content_digest(message.SerializeToString(deterministic=True)) == digest:
            out[path] = message
    return out
