"""What the UI pages show, read from the catalog: one page of objects at a time (a page reads
the definitions it lists, never the catalog), an object's details, a page of history."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType, validate_name
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import Snapshot
from olympia.exceptions import (
    InvalidArgumentError,
    NoSuchNamespaceError,
    NotFoundError,
    OlympiaError,
)
from olympia.plan.changes import column_text
from olympia.plan.render import change_lines
from olympia.plan.versiondiff import ObjectChange, version_diff
from olympia.spec.iceberg import layout_of
from olympia.versions.history import (
    Diff,
    VersionInfo,
    history,
    object_actions,
    search_history,
)
from olympia.versions.history import diff as object_diff
from olympia.versions.timetravel import format_millis

#: Objects listed on one page unless ``limit`` says otherwise, and the most it may say.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
_KINDS = {"table": ObjectType.TABLE, "view": ObjectType.VIEW}


@dataclass
class Listing:
    """One page of namespaces, or of a namespace's tables and views.

    Args:
        items: The objects of the page.
        next_after: The cursor of the next page (``None``: this is the last).
        total: How many objects the listing holds (``None``: not counted).
        start: How many come before this page (when counted).
        prev_after: The cursor of the previous page (``""``: the first page; ``None``: this
            is the first page).
    """

    items: list[Namespace | Table | View]
    next_after: str | None
    total: int | None = None
    start: int = 0
    prev_after: str | None = None


def page_size(limit: int | None) -> int:
    """The page size asked for, checked.

    Raises:
        InvalidArgumentError: ``limit`` is not between 1 and :data:`MAX_PAGE_SIZE`.
    """
    if limit is None:
        return PAGE_SIZE
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidArgumentError(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
    return limit


def _read(snapshot: Snapshot, found: list[tuple[ObjectRef, str]],
          ) -> list[Namespace | Table | View]:
    """The definitions of ``found`` (all of one kind), read concurrently."""
    if not found:
        return []
    kind = found[0][0].type
    paths = [p for _, p in found]
    if kind == ObjectType.NAMESPACE:
        return [Namespace.from_proto(d) for d in snapshot.files.read_defs(paths, pb.NamespaceDef)]
    if kind == ObjectType.TABLE:
        return [Table.from_proto(d, r.namespace, r.name) for (r, _), d in
                zip(found, snapshot.files.read_defs(paths, pb.TableDef), strict=True)]
    return [View.from_proto(d, r.namespace, r.name) for (r, _), d in
            zip(found, snapshot.files.read_defs(paths, pb.ViewDef), strict=True)]


def namespaces_page(snapshot: Snapshot, after: str | None, limit: int) -> Listing:
    """Up to ``limit`` namespaces named above ``after``, with their definitions (a page of
    the read API's :meth:`~olympia.catalog.reader.CatalogReader.names_page`)."""
    page = snapshot.names_page(ObjectType.NAMESPACE, None, after, limit)
    items = _read(snapshot, [(ObjectRef(ObjectType.NAMESPACE, name), path)
                             for name, path in page.entries])
    return Listing(items, page.next_after)


def check_prefix(prefix: str | None) -> str | None:
    """A name prefix to find (``None``: none, or blank).

    Raises:
        InvalidNameError: it holds what no name may (a space, a control character) or is
            longer than any name.
    """
    if prefix is None or not prefix.strip():
        return None
    validate_name(ObjectType.TABLE, prefix.strip(), MAX_PREFIX_BYTES)
    return prefix.strip()


#: The longest name prefix a find takes, in bytes (no name of the format is longer).
MAX_PREFIX_BYTES = 1000


def _named(snapshot: Snapshot, namespace: str, prefix: str | None,
           ) -> list[tuple[ObjectRef, str]]:
    """(ref, definition path) of the tables and views of ``namespace`` whose names start
    with ``prefix``, in name order (a table before a view of the same name): one key range
    of the tree per kind, reading the keys that match and no definition."""
    found = [(ObjectRef(kind, namespace, name), path)
             for kind in (ObjectType.TABLE, ObjectType.VIEW)
             for name, path in snapshot.names(kind, namespace, None, prefix or "")]
    return sorted(found, key=lambda f: (f[0].name, f[0].type))


def _label(ref: ObjectRef) -> str:
    return f"{'view' if ref.type == ObjectType.VIEW else 'table'}:{ref.name}"


def contents_page(snapshot: Snapshot, namespace: str, after: str | None,
                  limit: int, prefix: str | None = None) -> Listing:
    """Up to ``limit`` of the tables and views of ``namespace`` (those whose names start with
    ``prefix``, when given), in one list by name, after the cursor ``after``
    (``table:<name>`` or ``view:<name>``, as :attr:`Listing.next_after` gives it), with the
    total and the previous page's cursor: the keys of the range are counted (no definition
    read), then the page's definitions are read.

    Raises:
        NoSuchNamespaceError: no such namespace.
        InvalidArgumentError: a malformed cursor.
    """
    if not snapshot.namespace_exists(namespace):
        raise NoSuchNamespaceError(f"namespace {namespace} does not exist")
    found = _named(snapshot, namespace, prefix)
    start = 0
    if after is not None:
        label, sep, name = after.partition(":")
        if not sep or label not in _KINDS or not name:
            raise InvalidArgumentError(f"after must be table:<name> or view:<name>, got "
                                       f"{after[:200]!r}")
        cursor = (name, _KINDS[label])
        start = next((i for i, (r, _) in enumerate(found) if (r.name, r.type) > cursor),
                     len(found))
    page = found[start:start + limit]
    items: dict[ObjectRef, Namespace | Table | View] = {}
    for kind in (ObjectType.TABLE, ObjectType.VIEW):
        chosen = [f for f in page if f[0].type == kind]
        items.update(zip((r for r, _ in chosen), _read(snapshot, chosen), strict=True))
    back = max(0, start - limit)
    return Listing([items[r] for r, _ in page],
                   _label(page[-1][0]) if start + limit < len(found) else None,
                   len(found), start,
                   None if start == 0 else "" if back == 0 else _label(found[back - 1][0]))


@dataclass
class Found:
    """One page of a catalog-wide find: (ref) of the tables and views found, in namespace
    then name order, the next page's cursor, and how many namespaces were looked in."""

    refs: list[ObjectRef]
    next_after: str | None
    namespaces: int


def find(snapshot: Snapshot, prefix: str, after: str | None, limit: int) -> Found:
    """The tables and views whose names start with ``prefix``, in every namespace, after
    the cursor ``after`` (``<kind> <namespace> <name>``): one key range of the tree per
    namespace and kind, stopping after ``limit`` matches; no definition is read.

    Raises:
        InvalidArgumentError: a malformed cursor.
    """
    low = None if after is None else _order(_cursor(snapshot, after))
    out: list[ObjectRef] = []
    looked = 0
    first = None if low is None else low[0]
    for ns, _ in snapshot.names(ObjectType.NAMESPACE):
        if first is not None and ns < first:
            continue
        looked += 1
        out += [r for r, _ in _named(snapshot, ns, prefix) if low is None or _order(r) > low]
        if len(out) > limit:
            break
    last = out[limit - 1] if len(out) > limit else None
    return Found(out[:limit], None if last is None else
                 f"{last.type.label} {last.namespace} {last.name}", looked)


@dataclass
class ColumnRow:
    """A column as one row of a table: nested parts follow their parent, indented."""

    path: str
    depth: int
    type_text: str
    nullable: bool
    comment: str
    properties: dict[str, str]


def column_rows(columns: tuple[Column, ...] | list[Column]) -> list[ColumnRow]:
    """Every column and, below it, its struct fields, list element and map key and value."""
    rows: list[ColumnRow] = []

    def add(col: Column, label: str, depth: int) -> None:
        rows.append(ColumnRow(label, depth, column_text(col), col.nullable, col.comment,
                              dict(sorted(col.properties.items()))))
        for child in col.fields:
            add(child, child.name, depth + 1)
        for part, inner in (("element", col.element), ("key", col.key),
                            ("value", col.value)):
            if inner is not None:
                add(inner, f"({part})", depth + 1)

    for col in columns:
        add(col, col.name, 0)
    return rows


@dataclass
class IcebergDetails:
    """What an Iceberg table's metadata file says, or why it could not be read."""

    error: str | None = None
    format_version: int | None = None
    current_snapshot: dict[str, Any] | None = None
    partition_spec: str = ""
    sort_order: str = ""
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    refs: list[dict[str, Any]] = field(default_factory=list)
    owner: str | None = None


#: Actions listed per version on the history page (a version may record thousands).
ACTIONS_SHOWN = 25
#: Snapshots listed on an Iceberg table's page, newest first; as many of the table's latest
#: catalog versions are looked at for the version that made each one current.
RECENT_SNAPSHOTS = 10
#: Format properties the overview shows in words (their JSON is not repeated).
SHOWN_IN_OVERVIEW = frozenset({"partition-spec", "sort-order"})


def iceberg_details(catalog: Catalog, table: Table, version: int) -> IcebergDetails | None:
    """The Iceberg metadata of ``table`` (as of catalog ``version``) through pyiceberg, each
    recent snapshot with the catalog version that made it current when that is among the
    table's last :data:`RECENT_SNAPSHOTS` versions (``None``: not an Iceberg table with a
    metadata file, or pyiceberg is not installed)."""
    try:
        from pyiceberg.io import load_file_io

        from olympia.iceberg.metadata import is_iceberg, read_table_metadata
        from olympia.iceberg.options import iceberg_properties
    except ModuleNotFoundError:
        return None
    if not is_iceberg(table):
        return None
    name = f"{table.namespace}.{table.name}"
    io = load_file_io(iceberg_properties(catalog.uri, catalog.storage.options), table.location)
    try:
        metadata = read_table_metadata(io, table.location, name)
    except (OlympiaError, OSError, ValueError) as exc:  # shown on the page, not raised
        return IcebergDetails(error=str(exc))
    current = metadata.current_snapshot()
    try:  # in the notation of the catalog's specs (`day(ts)`, `id desc`)
        layout = layout_of(table.format_properties, table.columns)
    except InvalidArgumentError as exc:
        return IcebergDetails(error=str(exc))

    def current_of(location: str) -> int | None:
        if location == table.location:
            return metadata.current_snapshot_id
        try:
            return read_table_metadata(io, location, name).current_snapshot_id
        except (OlympiaError, OSError, ValueError):  # gone (expired): that link is left out
            return None

    made = _snapshot_versions(catalog, ObjectRef(ObjectType.TABLE, table.namespace,
                                                 table.name), version, current_of)

    def snap(s: Any) -> dict[str, Any]:
        summary = dict(s.summary.additional_properties) if s.summary else {}
        return {"id": s.snapshot_id, "parent": s.parent_snapshot_id,
                "at": format_millis(s.timestamp_ms),
                "operation": str(s.summary.operation.value) if s.summary else "",
                "records": summary.get("total-records"),
                "data_files": summary.get("total-data-files"),
                "delete_files": summary.get("total-delete-files"),
                "version": made.get(s.snapshot_id),
                "summary": dict(sorted(summary.items()))}

    recent = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms,
                    reverse=True)[:RECENT_SNAPSHOTS]
    refs = [{"name": ref_name, "kind": str(ref.snapshot_ref_type.value),
             "snapshot": ref.snapshot_id} for ref_name, ref in sorted(metadata.refs.items())]
    return IcebergDetails(
        format_version=metadata.format_version,
        current_snapshot=None if current is None else snap(current),
        partition_spec=", ".join(layout.partition_texts()) or "unpartitioned",
        sort_order=", ".join(layout.sort_texts()) or "unsorted",
        snapshots=[snap(s) for s in recent], refs=refs,
        owner=metadata.properties.get("owner"))


#: View definitions one page of "used by" reads at most.
USED_BY_READS = 200


@dataclass
class UsedBy:
    """One stretch of the catalog's views (in namespace and name order) searched for those
    that reference a table: those found, how many were read, where the next stretch starts
    (``<namespace> <name>`` of the last one read; ``None``: no view is left)."""

    views: list[View]
    read: int
    next_after: str | None


def used_by(snapshot: Snapshot, table: ObjectRef, after: str | None,
            reads: int) -> UsedBy:
    """The views that reference ``table`` among the next ``reads`` views after ``after``:
    a key range of the tree and those views' definitions (no index of references is kept:
    a view names what it reads, nothing names its readers).

    Raises:
        InvalidArgumentError: a malformed cursor.
    """
    cursor = None if after is None else _cursor(snapshot, f"view {after}")
    found = list(islice(snapshot.refs_after(ObjectType.VIEW, cursor), reads + 1))
    page = found[:reads]
    views = [v for v in _read(snapshot, page) if isinstance(v, View)
             and (table.namespace, table.name) in v.referenced_objects]
    last = page[-1][0] if len(found) > reads else None
    return UsedBy(views, len(page), None if last is None else f"{last.namespace} {last.name}")


@dataclass
class Owner:
    """Who owns a table, and where that was read (``""``: the table's own properties)."""

    name: str | None
    source: str = ""


def owner_of(snapshot: Snapshot, table: Table, iceberg: IcebergDetails | None) -> Owner:
    """The ``owner`` property of the table, else of its Iceberg metadata, else of its
    namespace (one definition read)."""
    if table.properties.get("owner"):
        return Owner(table.properties["owner"])
    if iceberg is not None and iceberg.owner:
        return Owner(iceberg.owner, "Iceberg table property")
    found = snapshot.load_namespace(table.namespace).properties.get("owner")
    return Owner(found, f"of namespace {table.namespace}" if found else "")


def _snapshot_versions(catalog: Catalog, ref: ObjectRef, version: int,
                       current_of: Callable[[str], int | None]) -> dict[int, int]:
    """Snapshot id -> the catalog version that made it the table's current snapshot, among
    the last :data:`RECENT_SNAPSHOTS` versions that changed the table at or below
    ``version`` (following its renames) among the :data:`LAST_CHANGE_READS` versions read:
    one definition and one metadata file read per version found."""
    page = search_history(catalog, ref=ref, limit=RECENT_SNAPSHOTS, before=version + 1,
                          max_reads=LAST_CHANGE_READS)
    seen: list[tuple[int, int | None, bool]] = []  # (version, its current snapshot, created)
    name = ref
    for entry in page.versions:  # newest first
        try:
            location = catalog.at_version(entry.version).load_table(name.namespace,
                                                                    name.name).location
        except NotFoundError:  # dropped by this version: it made no snapshot current
            location = ""
        done, name = object_actions(entry, name)
        seen.append((entry.version, current_of(location) if location else None,
                     any(a.type == A.TABLE_CREATE for a in done)))
    made: dict[int, int] = {}
    for (number, snapshot, created), older in zip(seen, [*seen[1:], None], strict=True):
        # it made that snapshot current if the version before it had another (or none)
        if snapshot is not None and (created if older is None else older[1] != snapshot):
            made.setdefault(snapshot, number)
    return made


@dataclass
class HistoryPage:
    """A page of versions, newest first, and what the timeline marks.

    ``ref`` and ``user`` are the filter (``None``: none); a filtered page read the versions
    from ``top`` down to ``oldest_read`` (at most :data:`SEARCH_READS`) and may list fewer
    than asked, none even, with older versions left to search from ``next_before``.
    """

    entries: list[VersionInfo]
    latest: int
    oldest: int
    oldest_millis: int
    exports: list[pb.SnapshotExportDef]
    next_before: int | None
    top: int
    ref: ObjectRef | None = None
    user: str | None = None
    oldest_read: int | None = None
    touched: dict[int, list[str]] = field(default_factory=dict)

    @property
    def filtered(self) -> bool:
        return self.ref is not None or self.user is not None


#: Versions one page of a filtered history (or an object's "last changed") reads at most.
SEARCH_READS = 200
#: The longest ``user`` a history is filtered by.
MAX_USER = 200


def object_of(snapshot: Snapshot, kind: str, ns: str | None, name: str | None) -> ObjectRef:
    """The object ``?object=<kind>&ns=<namespace>[&name=<name>]`` names, its names checked.

    Raises:
        InvalidArgumentError: an unknown kind, or a name missing or given where none is.
        InvalidNameError: a name the catalog's format cannot hold.
    """
    types = {"namespace": ObjectType.NAMESPACE, **_KINDS}
    if kind not in types:
        raise InvalidArgumentError(f"object must be namespace, table or view, got {kind!r}")
    if not ns:
        raise InvalidArgumentError("object needs ns=<namespace>")
    if (types[kind] == ObjectType.NAMESPACE) != (not name):
        raise InvalidArgumentError("a table or view needs name=<name>; a namespace takes none")
    ref = ObjectRef(types[kind], ns, name or "")
    snapshot.codec.key(ref)  # refuses a name the format cannot hold
    return ref


def history_page(catalog: Catalog, before: int | None, limit: int,
                 ref: ObjectRef | None = None, user: str | None = None,
                 reads: int | None = None) -> HistoryPage:
    """Up to ``limit`` versions below ``before``: one root read per version listed, plus the
    oldest kept version's (the retention window's start). With ``ref`` or ``user``, the
    versions that changed that object or were made by that user, among at most ``reads``
    versions read (default :data:`SEARCH_READS`; :func:`olympia.versions.search_history`).

    Raises:
        InvalidArgumentError: ``before`` is not a positive number, or ``user`` is too long.
    """
    if before is not None and before < 1:
        raise InvalidArgumentError(f"before must be a positive version number, got {before}")
    if user is not None and len(user) > MAX_USER:
        raise InvalidArgumentError(f"user must be at most {MAX_USER} characters")
    oldest = catalog.files.oldest_version()
    oldest_millis = catalog.files.read_root(oldest).created_at_millis
    exports = sorted(catalog.catalog_def.exports.values(), key=lambda e: e.version)
    latest = catalog.refresh()
    top = latest if before is None else min(before - 1, latest)
    if ref is None and user is None:
        entries = history(catalog, limit=limit, before=before)
        more = bool(entries) and entries[-1].version > oldest
        return HistoryPage(entries, latest, oldest, oldest_millis, exports,
                           entries[-1].version if more else None, top)
    found = search_history(catalog, ref=ref, user=user, limit=limit, before=before,
                           max_reads=SEARCH_READS if reads is None else reads)
    return HistoryPage(found.versions, latest, oldest, oldest_millis, exports,
                       found.next_before, top, ref, user, found.oldest_read,
                       {} if ref is None else _touched(found.versions, ref))


def _touched(entries: list[VersionInfo], ref: ObjectRef) -> dict[int, list[str]]:
    """Version -> what it did to ``ref`` (named as at the newest of ``entries``), following
    its renames down the page; a rollback says which."""
    out: dict[int, list[str]] = {}
    for entry in entries:
        if entry.rollback is not None:
            out[entry.version] = [f"rollback of {entry.rollback[0]} to {entry.rollback[1]} "
                                  f"changed {ref}"]
            continue
        done, ref = object_actions(entry, ref)
        out[entry.version] = [actions.describe(a) for a in done]
    return out


#: Versions an object's page reads at most for its last change (its History reads more).
LAST_CHANGE_READS = 50


def last_change(catalog: Catalog, version: int, ref: ObjectRef) -> HistoryPage:
    """The version at or below ``version`` that last changed ``ref``, among at most
    :data:`LAST_CHANGE_READS` versions read (one root each)."""
    return history_page(catalog, version + 1, 1, ref, reads=LAST_CHANGE_READS)


#: Changes listed on one page of a diff unless ``limit`` says otherwise.
DIFF_PAGE = 100
#: The (namespace, kind) rows a diff's summary lists; the rest are counted in its totals.
SUMMARY_ROWS = 200
_LINE_CLASS = {"+": "add", "-": "drop", "~": "change", "!": "drop"}


@dataclass
class DiffPage:
    """A diff's summary (from the keys of both versions) and one page of its changes, each
    with its lines as (class, text): ``add``, ``drop``, ``change`` or ``""``."""

    coarse: Diff
    totals: dict[str, dict[str, int]]
    rows: list[tuple[str, str, dict[str, int]]]
    hidden_rows: int
    matched: int  # the objects (keys) that differ, in the namespace asked for
    start: int  # how many of them come before this page
    shown: int  # how many are on it (a rename's two names are one change)
    changes: list[tuple[ObjectChange, list[tuple[str, str]]]]
    namespace: str | None
    next_after: str | None


def _order(ref: ObjectRef) -> tuple[str, bool, str, int]:
    """The order of a diff's objects: by namespace, the namespace first, then by name."""
    return ref.namespace, ref.type != ObjectType.NAMESPACE, ref.name, ref.type


def _cursor(snapshot: Snapshot, after: str) -> ObjectRef:
    """The object a diff page's ``after`` names: ``<kind> <namespace>[ <name>]`` (names hold
    no spaces).

    Raises:
        InvalidArgumentError: a malformed cursor.
    """
    kind, _, rest = after.partition(" ")
    ns, _, name = rest.partition(" ")
    try:
        return object_of(snapshot, kind, ns, name or None)
    except (InvalidArgumentError, ValueError) as exc:
        raise InvalidArgumentError(f"after must be '<kind> <namespace>[ <name>]' as a diff "
                                   f"page gives it, got {after[:200]!r}") from exc


def diff_page(catalog: Catalog, older: int, newer: int, namespace: str | None,
              after: str | None, limit: int) -> DiffPage:
    """The summary of the diff from ``older`` to ``newer``, then up to ``limit`` of its
    changes (of ``namespace`` only, when given) after the cursor ``after``. The summary and
    the page's choice read only the two trees' differing nodes; definitions are read for the
    page's objects only (:func:`olympia.plan.versiondiff.version_diff` with ``within``); a
    rename shows, as one, on the page of each of its names.

    Raises:
        InvalidArgumentError: a malformed cursor.
        InvalidNameError: a namespace the catalog's format cannot hold.
        VersionNotFoundError: either version does not exist (or has expired).
    """
    snapshot = catalog.at_version(newer)
    if namespace is not None:
        snapshot.codec.namespace_part(namespace)  # refuses a name the format cannot hold
    low = None if after is None else _order(_cursor(snapshot, after))
    coarse = object_diff(catalog, older, newer)
    counts = coarse.counts()
    totals: dict[str, dict[str, int]] = {}
    for (_, kind), row in counts.items():
        total = totals.setdefault(kind, {"created": 0, "changed": 0, "dropped": 0})
        for label, n in row.items():
            total[label] += n
    refs = sorted((r for r in (*coarse.added, *coarse.removed, *coarse.changed)
                   if namespace is None or r.namespace == namespace), key=_order)
    start = 0 if low is None else next((i for i, r in enumerate(refs) if _order(r) > low),
                                       len(refs))
    page = refs[start:start + limit]
    chosen = set(page)
    changes = [] if not page else version_diff(catalog, older, newer, chosen.__contains__).changes
    last = page[-1] if start + limit < len(refs) else None
    rows = [(ns, kind, row) for (ns, kind), row in counts.items()]
    return DiffPage(
        coarse, dict(sorted(totals.items())), rows[:SUMMARY_ROWS],
        max(0, len(rows) - SUMMARY_ROWS), len(refs), start, len(page),
        [(c, [(_LINE_CLASS.get(line.strip()[:1], ""), line)
              for line in change_lines(c.change, False)[1:]]) for c in changes],
        namespace,
        None if last is None else " ".join(p for p in (last.type.label, last.namespace,
                                                      last.name) if p))


def is_export(entry: VersionInfo) -> bool:
    """Whether ``entry`` recorded an export."""
    return any(a.WhichOneof("payload") == "export" for a in entry.actions)


#: Versions the page of a missing object looks back through for the last one that had it.
LOOK_BACK = 50


def last_version_with(catalog: Catalog, below: int, ref: ObjectRef,
                      limit: int = LOOK_BACK) -> Snapshot | None:
    """The last version before the one that dropped ``ref`` (or renamed it away, or rolled
    back past it), found among the ``limit`` versions up to ``below``: one root read each
    (:func:`olympia.versions.search_history`).

    Returns:
        That version, or ``None`` (not within reach, or a version expired meanwhile).
    """
    try:
        page = search_history(catalog, ref=ref, limit=1, before=below + 1, max_reads=limit)
        return catalog.at_version(page.versions[0].version - 1) if page.versions else None
    except NotFoundError:  # expired while it was looked for
        return None
