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


# protobuf enum values read once: an ``A.NAME`` lookup is a Python call, and conflict checks
# run for every version a commit catches up on
_INFO = A.TRANSACTION_INFO
_ROLLBACK = A.CATALOG_ROLLBACK
_STRUCTURAL = frozenset({A.NAMESPACE_DROP, A.NAMESPACE_RENAME})
_CHILD_TYPES = (ObjectType.TABLE, ObjectType.VIEW)


def written(action: apb.ActionDef) -> set[ObjectRef]:
    """Objects whose definition an action changes (a rollback changes everything)."""
    if action.type == _INFO:
        return set()
    if action.type == _ROLLBACK:
        return {_EVERYTHING}
    ref = ref_of(action)
    if ref is None:
        return {_CATALOG}
    new = renamed_ref(action)
    return {ref} if new is None else {ref, new}


@dataclass(frozen=True)
class _Footprint:
    """What one action changes, as conflict checks compare it (computed once per action)."""

    action: apb.ActionDef
    writes: frozenset[ObjectRef]
    structural: frozenset[str]  # namespaces it drops or renames (their children depend on them)
    children: frozenset[str]  # namespaces whose tables or views it changes

    @classmethod
    def of(cls, action: apb.ActionDef) -> _Footprint:
        writes = frozenset(written(action))
        ref = ref_of(action)
        structural = frozenset(
            {ref.namespace} if ref is not None and action.type in _STRUCTURAL else ())
        children = frozenset(r.namespace for r in writes if r.type in _CHILD_TYPES)
        return cls(action, writes, structural, children)

    def clash(self, other: _Footprint) -> str | None:
        """The object both change, or the namespace one removes under the other, if any."""
        if _EVERYTHING in self.writes or _EVERYTHING in other.writes:
            return "the whole catalog (rollback)"
        common = self.writes & other.writes
        if common:
            return str(min(common))
        namespaces = (other.structural & self.children) or (self.structural & other.children)
        return f"namespace {min(namespaces)}" if namespaces else None


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
    mine = [_Footprint.of(a) for a in ours if a.type != _INFO]
    for their in theirs:
        other = _Footprint.of(their)
        if not other.writes:
            continue
        for our in mine:
            obj = our.clash(other)
            if obj is not None:
                return our.action, their, obj
        if reads is not None:
            hit = reads.touched_by(other.writes)
            if hit is not None:
                return None, their, "everything" if hit == _EVERYTHING else str(hit)
    return None
