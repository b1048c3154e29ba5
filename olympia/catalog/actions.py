"""Actions: what a transaction did, how it is recorded in a root, and when two conflict."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from olympia._proto import actions_pb2 as apb
from olympia.catalog.keys import CATALOG_DEF_KEY, KeyCodec, ObjectRef, ObjectType
from olympia.exceptions import CorruptFileError

A = apb.ActionType

RENAME_TYPES = {A.NAMESPACE_RENAME, A.TABLE_RENAME, A.VIEW_RENAME}


def make(
    type_: int,
    ref: ObjectRef | None,
    def_path: str = "",
    info: Mapping[str, str] | None = None,
    **payload: object,
) -> apb.ActionDef:
    """Build an ActionDef; ``payload`` is one of the ActionDef oneof fields by name."""
    action = apb.ActionDef(type=type_, def_path=def_path)  # type: ignore[arg-type]
    if ref is not None:
        action.object.CopyFrom(
            apb.ObjectRef(type=int(ref.type), namespace=ref.namespace, name=ref.name)  # type: ignore[arg-type]
        )
    else:
        action.object.type = apb.CATALOG
    for name, value in payload.items():
        getattr(action, name).CopyFrom(value)
    if info:
        action.info.update(info)
    return action


def ref_of(action: apb.ActionDef) -> ObjectRef | None:
    """The object an action touched (None for catalog-level actions)."""
    kind = ObjectType(action.object.type)
    if kind == ObjectType.CATALOG:
        return None
    return ObjectRef(kind, action.object.namespace, action.object.name)


def renamed_ref(action: apb.ActionDef) -> ObjectRef | None:
    """For a rename: the object's new name."""
    ref = ref_of(action)
    if action.type not in RENAME_TYPES or ref is None:
        return None
    if ref.type == ObjectType.NAMESPACE:
        return ObjectRef(ref.type, action.rename.to_name)
    return ObjectRef(ref.type, ref.namespace, action.rename.to_name)


def encode_row(codec: KeyCodec, action: apb.ActionDef) -> tuple[str, str]:
    """The root-node row of an action: (object key or ``catalog_def``, base64 ActionDef)."""
    ref = ref_of(action)
    key = CATALOG_DEF_KEY if ref is None else codec.key(ref)
    return key, base64.b64encode(action.SerializeToString(deterministic=True)).decode("ascii")


def decode_row(value: str, where: str) -> apb.ActionDef:
    try:
        action = apb.ActionDef()
        action.ParseFromString(base64.b64decode(value.encode("ascii"), validate=True))
        return action
    except (binascii.Error, DecodeError, UnicodeEncodeError, ValueError) as exc:
        raise CorruptFileError(where, f"action row is not a base64 ActionDef ({exc})") from None


def type_name(action: apb.ActionDef) -> str:
    return str(apb.ActionType.Name(action.type))


def describe(action: apb.ActionDef) -> str:
    """A short human description: ``create table sales.orders``."""
    ref = ref_of(action)
    verb = type_name(action).lower().replace("_", " ")
    parts = verb.split(" ", 1)
    if len(parts) == 2 and parts[0] in ("namespace", "table", "view", "catalog"):
        verb = f"{parts[1]} {parts[0]}"
    target = "" if ref is None else f" {ref}"
    detail = ""
    which = action.WhichOneof("payload")
    if which == "rename":
        detail = f" -> {action.rename.to_name}"
    elif which == "rollback":
        detail = f" {action.rollback.from_version} -> {action.rollback.to_version}"
    elif which == "export":
        detail = f" {action.export.name} ({action.export.mode}) to {action.export.target}"
    elif which in ("property_keys", "columns"):
        names = getattr(action, which)
        detail = f" ({', '.join(names.keys if which == 'property_keys' else names.column_names)})"
    return f"{verb}{target}{detail}"


# --- conflict analysis --------------------------------------------------------------------

_EVERYTHING = ObjectRef(ObjectType.CATALOG, "*")
_CATALOG = ObjectRef(ObjectType.CATALOG, "")


def written(action: apb.ActionDef) -> set[ObjectRef]:
    """Objects whose definition an action changes (a rollback changes everything)."""
    if action.type == A.TRANSACTION_INFO:
        return set()
    if action.type == A.CATALOG_ROLLBACK:
        return {_EVERYTHING}
    ref = ref_of(action)
    if ref is None:
        return {_CATALOG}
    new = renamed_ref(action)
    return {ref} if new is None else {ref, new}


def _structural_namespaces(action: apb.ActionDef) -> set[str]:
    """Namespaces an action removes or renames (their children depend on them)."""
    if action.type in (A.NAMESPACE_DROP, A.NAMESPACE_RENAME):
        ref = ref_of(action)
        return {ref.namespace} if ref else set()
    return set()


def _child_namespaces(action: apb.ActionDef) -> set[str]:
    """Namespaces whose children an action creates, changes or removes."""
    return {r.namespace for r in written(action) if r.type in (ObjectType.TABLE, ObjectType.VIEW)}


@dataclass
class ReadSet:
    """What a SERIALIZABLE transaction read: objects and listings."""

    objects: set[ObjectRef] = field(default_factory=set)
    listings: set[tuple[ObjectType, str]] = field(default_factory=set)  # (kind, namespace|"")

    def touched_by(self, refs: Iterable[ObjectRef]) -> ObjectRef | None:
        for ref in refs:
            if ref == _EVERYTHING or ref in self.objects:
                return ref
            listing = (ref.type, "" if ref.type == ObjectType.NAMESPACE else ref.namespace)
            if listing in self.listings:
                return ref
        return None


def find_conflict(
    ours: Iterable[apb.ActionDef],
    theirs: Iterable[apb.ActionDef],
    reads: ReadSet | None = None,
) -> tuple[apb.ActionDef | None, apb.ActionDef, str] | None:
    """The first pair (our action, their action, object) that cannot be reconciled.

    SNAPSHOT isolation: two actions on the same object conflict; so do a namespace drop or
    rename and any change to a table or view inside that namespace; a rollback conflicts
    with everything. SERIALIZABLE (``reads`` given) also fails when they changed anything
    this transaction read or listed.
    """
    ours = [a for a in ours if a.type != A.TRANSACTION_INFO]
    for their in theirs:
        their_writes = written(their)
        if not their_writes:
            continue
        for our in ours:
            our_writes = written(our)
            if _EVERYTHING in our_writes or _EVERYTHING in their_writes:
                return our, their, "the whole catalog (rollback)"
            common = our_writes & their_writes
            if common:
                return our, their, str(min(common))
            clash = (_structural_namespaces(their) & _child_namespaces(our)) or (
                _structural_namespaces(our) & _child_namespaces(their)
            )
            if clash:
                return our, their, f"namespace {min(clash)}"
        if reads is not None:
            hit = reads.touched_by(their_writes)
            if hit is not None:
                return None, their, "everything" if hit == _EVERYTHING else str(hit)
    return None
