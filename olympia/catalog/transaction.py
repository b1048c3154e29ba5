"""Transactions: stage changes, read your own writes, commit one new version atomically.

Commit protocol (spec "Commit a transaction"): write the new definition files and the
changed non-root nodes concurrently, then create ``vn/<v+1>`` exclusively, then write
``vn/latest`` best-effort. If another writer created ``vn/<v+1>`` first, the actions of every
newer root are checked against this transaction's (see :func:`actions.find_conflict`);
without a conflict the staged changes are replayed onto the new latest tree and the commit
is retried (bounded, jittered); otherwise :class:`CommitConflict` names the object and the
version that won.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.columns import change_columns
from olympia.catalog.files import LATEST, Root
from olympia.catalog.keys import ObjectRef, ObjectType, def_path, version_path
from olympia.catalog.objects import (
    Column,
    Namespace,
    Table,
    View,
    as_identifier,
    assign_column_ids,
    coerce_columns,
)
from olympia.catalog.reader import CatalogReader, Identifier, Snapshot
from olympia.exceptions import (
    AlreadyExistsError,
    CatalogError,
    CommitConflict,
    CorruptFileError,
    FileAlreadyExists,
    InvalidArgumentError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NotFoundError,
    ProtectedObjectError,
    StorageError,
)
from olympia.tree import btree
from olympia.tree.node import Node, encode_node

if TYPE_CHECKING:
    from olympia.catalog.catalog import Catalog

NS, TABLE, VIEW = ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW


def now_millis() -> int:
    return time.time_ns() // 1_000_000


class Transaction(CatalogReader):
    """A unit of change against one catalog; use as ``with catalog.transaction() as txn:``."""

    def __init__(self, catalog: Catalog, base: Snapshot, isolation: int) -> None:
        self.catalog = catalog
        self.files = catalog.files
        self.base = base
        self.codec = base.codec
        self.isolation = isolation
        self.version: int | None = None
        self._pending: dict[str, str | None] = {}
        self._new_defs: dict[str, bytes] = {}
        self._actions: list[apb.ActionDef] = []
        self._info: dict[str, str] = {}
        self._reads = actions.ReadSet() if isolation == pb.SERIALIZABLE else None
        self._catalog_def: tuple[str, pb.CatalogDef] | None = None
        self._tree_from: Root | None = None
        self._rollback_from: str | None = None
        self._state = "open"
        self._corrupt: CorruptFileError | None = None  # a read failed verification
        self.before_commit: list[Callable[[Transaction], None]] = []
        self.after_end: list[Callable[[Transaction], None]] = []

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and self._state == "open":
            self.commit()
        else:
            self.abort()

    @property
    def actions(self) -> list[apb.ActionDef]:
        """The actions staged so far."""
        return list(self._actions)

    @property
    def catalog_def(self) -> pb.CatalogDef:
        return self._catalog_def[1] if self._catalog_def else self.base.catalog_def

    # --- reads (see your own writes) ------------------------------------------------------

    def _tree_root(self, base: Snapshot) -> Node:
        return self._tree_from.node if self._tree_from else base.root.node

    @contextmanager
    def _verifying(self) -> Iterator[None]:
        """Remember a read that failed verification: commit then refuses (ruling 13), even
        if the caller caught the error."""
        try:
            yield
        except CorruptFileError as exc:
            self._corrupt = exc
            raise

    def _get(self, ref: ObjectRef) -> str | None:
        key = self.codec.key(ref)
        if self._reads is not None:
            self._reads.objects.add(ref)
        if key in self._pending:
            return self._pending[key]
        with self._verifying():
            return btree.get(self.base.nodes, self._tree_root(self.base), key)

    def _read_defs(self, paths: list[str], cls: type[Any]) -> list[Any]:
        with self._verifying():
            return super()._read_defs(paths, cls)

    def _scan(self, kind: ObjectType, namespace: str | None) -> Iterator[tuple[str, str]]:
        if self._reads is not None:
            self._reads.listings.add((kind, namespace or ""))
        prefix = self._prefix(kind, namespace)
        with self._verifying():
            merged = dict(btree.scan_prefix(self.base.nodes, self._tree_root(self.base), prefix))
        staged = sorted((k, v) for k, v in self._pending.items() if k.startswith(prefix))
        for key, value in staged:
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        yield from sorted(merged.items())

    # --- staging helpers ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state != "open":
            raise CatalogError(f"transaction is already {self._state}")

    def _put(self, ref: ObjectRef, message: Message) -> str:
        content = message.SerializeToString(deterministic=True)
        path = def_path(ref, content)
        self._new_defs[path] = content
        self.files.remember_def(path, message)
        self._pending[self.codec.key(ref)] = path
        return path

    def _delete(self, ref: ObjectRef) -> None:
        self._pending[self.codec.key(ref)] = None

    def _record(self, type_: int, ref: ObjectRef | None, def_path_: str = "",
                **payload: Any) -> None:
        self._actions.append(actions.make(type_, ref, def_path_, **payload))

    def annotate(self, **info: str) -> None:
        """Attach metadata (spec digest, git commit, tool) recorded with the version."""
        self._check_open()
        self._info.update({k: str(v) for k, v in info.items()})

    # --- namespaces ----------------------------------------------------------------------

    def create_namespace(self, namespace: str, properties: Mapping[str, str] | None = None,
                         comment: str = "", protected: bool = False) -> Namespace:
        self._check_open()
        ref = ObjectRef(NS, namespace)
        if self._get(ref) is not None:
            raise AlreadyExistsError(f"namespace {namespace} already exists")
        ns = Namespace(namespace, _str_map(properties), comment, protected)
        self._record(A.NAMESPACE_CREATE, ref, self._put(ref, ns.to_proto()))
        return ns

    def alter_namespace(self, namespace: str, set_properties: Mapping[str, str] | None = None,
                        unset_properties: Sequence[str] = (), comment: str | None = None,
                        protected: bool | None = None) -> Namespace:
        """Set/unset properties, change the comment or the protected flag."""
        self._check_open()
        ns = self.load_namespace(namespace)
        props, changes = _alter_properties(ns.properties, set_properties, unset_properties)
        new = replace(ns, properties=props,
                      comment=ns.comment if comment is None else comment,
                      protected=ns.protected if protected is None else protected)
        if new == ns:
            return ns
        ref = ObjectRef(NS, namespace)
        path = self._put(ref, new.to_proto())
        self._record_property_changes(A.NAMESPACE_ALTER_SET_PROPERTIES,
                                      A.NAMESPACE_ALTER_UNSET_PROPERTIES, ref, path, changes)
        if (new.comment, new.protected) != (ns.comment, ns.protected):
            self._record(A.NAMESPACE_ALTER, ref, path)
        return new

    def drop_namespace(self, namespace: str, cascade: bool = False) -> None:
        """Drop a namespace; refuses a non-empty one unless ``cascade``."""
        self._check_open()
        ns = self.load_namespace(namespace)
        if ns.protected:
            raise ProtectedObjectError(f"namespace {namespace} is protected and cannot be dropped")
        tables, views = self.list_tables(namespace), self.list_views(namespace)
        if (tables or views) and not cascade:
            names = [f"{namespace}.{n}" for n in [*tables, *views]]
            raise NamespaceNotEmptyError(
                f"namespace {namespace} is not empty ({len(names)} objects, e.g. "
                f"{', '.join(names[:3])}); drop them first or use cascade"
            )
        for view in views:
            self.drop_view(namespace, view)
        for table in tables:
            self.drop_table(namespace, table)
        ref = ObjectRef(NS, namespace)
        self._delete(ref)
        self._record(A.NAMESPACE_DROP, ref)

    def rename_namespace(self, namespace: str, new_name: str) -> Namespace:
        """Rename a namespace, moving its tables and views with it."""
        self._check_open()
        ns = self.load_namespace(namespace)
        if self.namespace_exists(new_name):
            raise AlreadyExistsError(f"namespace {new_name} already exists")
        old_ref, new_ref = ObjectRef(NS, namespace), ObjectRef(NS, new_name)
        tables, views = self.list_tables(namespace), self.list_views(namespace)
        moved = replace(ns, name=new_name)
        self._delete(old_ref)
        self._record(A.NAMESPACE_RENAME, old_ref, self._put(new_ref, moved.to_proto()),
                     rename=apb.RenameDef(from_name=namespace, to_name=new_name))
        for table in tables:
            t = self.load_table(namespace, table)
            self._move(TABLE, namespace, table, replace(t, namespace=new_name).to_proto(),
                       new_name)
        for view in views:
            v = self.load_view(namespace, view)
            self._move(VIEW, namespace, view, replace(v, namespace=new_name).to_proto(), new_name)
        return moved

    def _move(self, kind: ObjectType, namespace: str, name: str, message: Message,
              new_namespace: str) -> None:
        """Move a child object to a renamed namespace (recorded as its drop and create)."""
        old_ref, new_ref = ObjectRef(kind, namespace, name), ObjectRef(kind, new_namespace, name)
        self._delete(old_ref)
        self._record(A.TABLE_DROP if kind == TABLE else A.VIEW_DROP, old_ref)
        self._record(A.TABLE_CREATE if kind == TABLE else A.VIEW_CREATE, new_ref,
                     self._put(new_ref, message))

    # --- tables ---------------------------------------------------------------------------

    def _require_namespace(self, namespace: str) -> None:
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"namespace {namespace} does not exist")

    def _require_free(self, namespace: str, name: str) -> None:
        for kind in (TABLE, VIEW):
            if self._get(ObjectRef(kind, namespace, name)) is not None:
                raise AlreadyExistsError(f"{kind.label} {namespace}.{name} already exists")

    def create_table(self, identifier: Identifier, name: str | None = None,
                     columns: Sequence[Column | Mapping[str, Any]] = (),
                     properties: Mapping[str, str] | None = None, *, format: str = "iceberg",
                     table_type: str = "external", location: str = "",
                     format_properties: Mapping[str, str] | None = None, comment: str = "",
                     protected: bool = False) -> Table:
        """Create a table: ``create_table("ns", "t", columns=[{"name": "id", "type": "int8"}])``."""
        self._check_open()
        namespace, table_name = as_identifier(identifier, name)
        ref = ObjectRef(TABLE, namespace, table_name)
        self.codec.key(ref)  # validates both names before anything else
        self._require_namespace(namespace)
        self._require_free(namespace, table_name)
        table = Table(
            namespace, table_name, assign_column_ids(coerce_columns(columns), 1),
            _str_map(properties), format.lower(), table_type.lower(), location,
            _str_map(format_properties), comment, protected,
        )
        self._record(A.TABLE_CREATE, ref, self._put(ref, table.to_proto()))
        return table

    def alter_table(
        self, identifier: Identifier, name: str | None = None, *,
        set_properties: Mapping[str, str] | None = None, unset_properties: Sequence[str] = (),
        add_columns: Sequence[Column | Mapping[str, Any]] = (),
        remove_columns: Sequence[str] = (), rename_columns: Mapping[str, str] | None = None,
        update_columns: Mapping[str, Column | Mapping[str, Any]] | None = None,
        column_order: Sequence[str] | None = None, comment: str | None = None,
        location: str | None = None, format_properties: Mapping[str, str] | None = None,
        protected: bool | None = None,
    ) -> Table:
        """Change a table. Column changes apply in this order: remove, rename, update, add,
        reorder; ``update_columns`` maps a column name to its new definition (type,
        nullability, comment, nested fields) and keeps its id."""
        self._check_open()
        table = self.load_table(identifier, name)
        ref = ObjectRef(TABLE, table.namespace, table.name)
        props, prop_changes = _alter_properties(table.properties, set_properties, unset_properties)
        renames = dict(rename_columns or {})
        change = change_columns(str(ref), table.columns, remove=remove_columns, rename=renames,
                                update=update_columns, add=add_columns, order=column_order)
        new = replace(
            table, columns=change.columns, properties=props,
            comment=table.comment if comment is None else comment,
            location=table.location if location is None else location,
            format_properties=table.format_properties if format_properties is None
            else _str_map(format_properties),
            protected=table.protected if protected is None else protected,
        )
        if new == table:
            return table
        path = self._put(ref, new.to_proto())
        self._record_property_changes(A.TABLE_ALTER_SET_PROPERTIES,
                                      A.TABLE_ALTER_UNSET_PROPERTIES, ref, path, prop_changes)
        col_actions = [
            (A.TABLE_ALTER_REMOVE_COLUMNS, list(remove_columns)),
            (A.TABLE_ALTER_RENAME_COLUMN, [f"{o}->{n}" for o, n in renames.items()]),
            (A.TABLE_ALTER_UPDATE_COLUMN, list((update_columns or {}).keys())),
            (A.TABLE_ALTER_ADD_COLUMNS, [c.name for c in change.added]),
        ]
        for type_, names_ in col_actions:
            if names_:
                self._record(type_, ref, path,
                             columns=apb.ColumnNamesDef(column_names=names_))
        if change.reordered:
            self._record(A.TABLE_ALTER_REORDER_COLUMNS, ref, path,
                         columns=apb.ColumnNamesDef(column_names=[c.name for c in new.columns]))
        others = (new.comment, new.location, dict(new.format_properties), new.protected)
        if others != (table.comment, table.location, dict(table.format_properties),
                      table.protected):
            self._record(A.TABLE_ALTER, ref, path)
        return new

    def drop_table(self, identifier: Identifier, name: str | None = None) -> None:
        self._drop(TABLE, identifier, name)

    def rename_table(self, identifier: Identifier, new_name: str) -> Table:
        """Rename a table within its namespace."""
        return self._rename(TABLE, identifier, new_name)  # type: ignore[return-value]

    def put_table(self, table: Table, *, create: bool = False) -> Table:
        """Stage a table's whole definition exactly as given, column ids included (for
        formats whose own metadata owns the schema, such as Iceberg field ids).

        Args:
            table: The new definition.
            create: Add a new table; otherwise replace an existing one (one TABLE_ALTER).

        Returns:
            ``table``.

        Raises:
            NoSuchNamespaceError, AlreadyExistsError: ``create`` and the namespace is missing
                or the name is taken.
            NoSuchTableError: not ``create`` and the table does not exist.
        """
        self._check_open()
        ref = ObjectRef(TABLE, table.namespace, table.name)
        self.codec.key(ref)
        if create:
            self._require_namespace(table.namespace)
            self._require_free(table.namespace, table.name)
        elif self.load_table(table.namespace, table.name) == table:
            return table
        self._record(A.TABLE_CREATE if create else A.TABLE_ALTER, ref,
                     self._put(ref, table.to_proto()))
        return table

    # --- views ---------------------------------------------------------------------------

    def _view(self, namespace: str, name: str, sql: str, dialect: str,
              columns: Sequence[Column | Mapping[str, Any]],
              referenced_objects: Sequence[Identifier], default_namespace: str,
              properties: Mapping[str, str] | None, comment: str, protected: bool) -> View:
        refs = tuple(as_identifier(r) for r in referenced_objects)
        for ns, obj in refs:
            if not (self.table_exists(ns, obj) or self.view_exists(ns, obj)):
                raise NotFoundError(  # the view's referenced object, table or view
                    f"view {namespace}.{name} references {ns}.{obj}, which does not exist")
        if not sql.strip():
            raise InvalidArgumentError(f"view {namespace}.{name} needs SQL text")
        return View(namespace, name, sql, dialect,
                    assign_column_ids(coerce_columns(columns), 1), refs, default_namespace,
                    _str_map(properties), comment, protected)

    def create_view(self, identifier: Identifier, name: str | None = None, sql: str = "", *,
                    dialect: str = "ansi", columns: Sequence[Column | Mapping[str, Any]] = (),
                    referenced_objects: Sequence[Identifier] = (), default_namespace: str = "",
                    properties: Mapping[str, str] | None = None, comment: str = "",
                    protected: bool = False) -> View:
        self._check_open()
        namespace, view_name = as_identifier(identifier, name)
        ref = ObjectRef(VIEW, namespace, view_name)
        self.codec.key(ref)
        self._require_namespace(namespace)
        self._require_free(namespace, view_name)
        view = self._view(namespace, view_name, sql, dialect, columns, referenced_objects,
                          default_namespace, properties, comment, protected)
        self._record(A.VIEW_CREATE, ref, self._put(ref, view.to_proto()))
        return view

    def replace_view(self, identifier: Identifier, name: str | None = None, sql: str = "", *,
                     dialect: str = "ansi", columns: Sequence[Column | Mapping[str, Any]] = (),
                     referenced_objects: Sequence[Identifier] = (),
                     default_namespace: str = "", properties: Mapping[str, str] | None = None,
                     comment: str = "", protected: bool = False) -> View:
        """Replace a view's whole definition."""
        self._check_open()
        old = self.load_view(identifier, name)
        view = self._view(old.namespace, old.name, sql, dialect, columns, referenced_objects,
                          default_namespace, properties, comment, protected)
        if view == old:
            return old
        ref = ObjectRef(VIEW, old.namespace, old.name)
        self._record(A.VIEW_REPLACE, ref, self._put(ref, view.to_proto()))
        return view

    def drop_view(self, identifier: Identifier, name: str | None = None) -> None:
        self._drop(VIEW, identifier, name)

    def _drop(self, kind: ObjectType, identifier: Identifier, name: str | None) -> None:
        self._check_open()
        obj: Table | View = (self.load_table(identifier, name) if kind == TABLE
                             else self.load_view(identifier, name))
        ref = ObjectRef(kind, obj.namespace, obj.name)
        if obj.protected:
            raise ProtectedObjectError(f"{ref.label} is protected and cannot be dropped")
        self._delete(ref)
        self._record(A.TABLE_DROP if kind == TABLE else A.VIEW_DROP, ref)

    def rename_view(self, identifier: Identifier, new_name: str) -> View:
        """Rename a view within its namespace."""
        return self._rename(VIEW, identifier, new_name)  # type: ignore[return-value]

    def _rename(self, kind: ObjectType, identifier: Identifier, new_name: str) -> Table | View:
        self._check_open()
        namespace, name = as_identifier(identifier)
        obj: Table | View = (self.load_table(namespace, name) if kind == TABLE
                             else self.load_view(namespace, name))
        new_ref = ObjectRef(kind, namespace, new_name)
        self.codec.key(new_ref)
        self._require_free(namespace, new_name)
        moved = replace(obj, name=new_name)
        old_ref = ObjectRef(kind, namespace, name)
        self._delete(old_ref)
        self._record(A.TABLE_RENAME if kind == TABLE else A.VIEW_RENAME, old_ref,
                     self._put(new_ref, moved.to_proto()),
                     rename=apb.RenameDef(from_name=name, to_name=new_name))
        return moved

    def _record_property_changes(self, set_type: int, unset_type: int, ref: ObjectRef,
                                 path: str, changes: tuple[list[str], list[str]]) -> None:
        set_keys, unset_keys = changes
        if set_keys:
            self._record(set_type, ref, path, property_keys=apb.PropertyKeysDef(keys=set_keys))
        if unset_keys:
            self._record(unset_type, ref, path,
                         property_keys=apb.PropertyKeysDef(keys=unset_keys))

    # --- catalog-level changes (used by versions and exports) -----------------------------

    def set_catalog_def(self, catalog_def: pb.CatalogDef, action: apb.ActionDef) -> None:
        """Replace the catalog definition in this version, recording ``action``."""
        self._check_open()
        content = catalog_def.SerializeToString(deterministic=True)
        path = def_path(None, content)
        self._new_defs[path] = content
        self.files.remember_def(path, catalog_def)
        self._catalog_def = (path, catalog_def)
        self._actions.append(action)

    def restore_tree(self, root: Root, action: apb.ActionDef) -> None:
        """Make this version's tree identical to ``root``'s (a rollback); nothing else may be
        staged in the same transaction."""
        self._check_open()
        if self._actions or self._pending:
            raise CatalogError("a rollback must be the only change in its transaction")
        self._tree_from = root
        self._rollback_from = self.base.root.path
        self._actions.append(action)

    # --- commit --------------------------------------------------------------------------

    def abort(self) -> None:
        """Discard the transaction: no version will refer to anything it staged.

        Staging writes nothing. A commit that failed (a conflict, a storage error) may
        already have written its definition and node files before the root race; they stay
        behind unreferenced, and expiry removes them once older than its grace period.
        """
        if self._state == "open":
            self._state = "aborted"
            self._ended()

    def _fail(self) -> None:
        self._state = "aborted"
        self._ended()

    def _ended(self) -> None:
        for hook in self.after_end:
            hook(self)

    @property
    def state(self) -> str:
        """``open``, ``committed``, ``aborted`` or ``saved`` (handed to another process)."""
        return self._state

    @property
    def has_reads(self) -> bool:
        """Whether this SERIALIZABLE transaction has read anything its commit must check."""
        return self._reads is not None and bool(self._reads.objects or self._reads.listings)

    def staged(self) -> tuple[dict[str, str | None], list[apb.ActionDef], dict[str, bytes]]:
        """The staged changes: key -> def path (None: deleted), the actions as a commit
        records them (annotations included), new def files."""
        return dict(self._pending), self._recorded(), dict(self._new_defs)

    def restore_staged(self, pending: Mapping[str, str | None],
                       recorded: Sequence[apb.ActionDef]) -> None:
        """Stage changes saved by another process (their def files already exist)."""
        self._check_open()
        if self._actions:
            raise CatalogError("restore_staged needs a transaction with nothing staged")
        self._pending.update(pending)
        for action in recorded:
            if action.type == A.TRANSACTION_INFO:
                self._info.update(action.info)
            else:
                self._actions.append(action)

    def mark_saved(self) -> None:
        """This process hands the transaction over; it can no longer be used here."""
        self._check_open()
        self._state = "saved"

    def _recorded(self) -> list[apb.ActionDef]:
        """The staged actions, then the annotations as one TRANSACTION_INFO action."""
        recorded = list(self._actions)
        if self._info:
            recorded.append(actions.make(A.TRANSACTION_INFO, None, info=self._info))
        return recorded

    def _rows(self) -> tuple[tuple[str, str], ...]:
        return tuple(actions.encode_row(self.codec, a) for a in self._recorded())

    def commit(self) -> int:
        """Commit as one new version and return it (the base version if nothing changed)."""
        self._check_open()
        if self._corrupt is not None:
            self._fail()
            raise CorruptFileError(self._corrupt.path, f"{self._corrupt.reason} (a read of "
                                   "this transaction failed verification: nothing committed)")
        for hook in self.before_commit:
            hook(self)
        if not self._actions:
            self._state = "committed"
            self.version = self.base.version
            self._ended()
            return self.version
        storage = self.files.storage
        base = self.base
        attempts = self.catalog.commit_attempts
        defs_written = False
        rows = self._rows()
        for attempt in range(attempts):
            order = base.catalog_def.order
            writer = btree.TreeWriter(base.nodes, self._tree_root(base))
            for key, value in sorted(self._pending.items()):
                if value is None:
                    writer.delete(key)
                else:
                    writer.put(key, value)
            created = max(now_millis(), base.created_at_millis + 1)
            flushed = writer.flush(created)
            cdef_path, cdef = self._catalog_def or (base.root.node.catalog_def, base.catalog_def)
            root = Node(flushed.keys, flushed.values, flushed.children, created,
                        catalog_def=cdef_path, previous_root=base.root.path,
                        rollback_from_root=self._rollback_from, actions=rows)
            files = {} if defs_written else dict(self._new_defs)
            files.update(btree.encode_files(flushed.files, order))
            root_bytes = encode_node(root, order)
            self._check_size(cdef, {**files, "root": root_bytes})
            storage.write_many(files)
            defs_written = True
            for path, node in flushed.files.items():
                base.nodes.remember(path, node)
            version = base.version + 1
            try:
                storage.create_exclusive(version_path(version), root_bytes)
            except FileAlreadyExists:
                base = self._rebase(base)
                time.sleep(random.uniform(0, 0.02 * 2 ** min(attempt, 6)))
                continue
            committed = Root(version, version_path(version), root, cdef)
            self.files.remember_root(committed)
            try:
                self.files.write_hint(LATEST, version)
            except StorageError:
                pass  # vn/latest is only a hint; discovery probes past it
            self._state = "committed"
            self.version = version
            self.catalog._advance(committed)
            self._ended()
            return version
        self._fail()
        raise CommitConflict(
            f"commit gave up after {attempts} attempts: other writers kept winning "
            f"(latest seen: version {base.version})", version=base.version)

    def _check_size(self, cdef: pb.CatalogDef, files: Mapping[str, bytes]) -> None:
        limit = cdef.node_file_max_size_bytes
        if not limit:
            return
        for path, data in files.items():
            if (path == "root" or path.startswith("node/")) and len(data) > limit:
                self._fail()
                raise CatalogError(
                    f"node file {path} would be {len(data)} bytes, above the catalog's "
                    f"node_file_max_size_bytes={limit}")

    def _rebase(self, base: Snapshot) -> Snapshot:
        """Check the versions committed since ``base``; return the latest if no conflict."""
        latest = self.files.discover_latest()
        for version in range(base.version + 1, latest.version + 1):
            theirs = Snapshot(self.files, self.files.read_root(version)).actions()
            found = actions.find_conflict(self._actions, theirs, self._reads)
            if found is not None:
                self._fail()
                ours, their, obj = found
                mine = f"{actions.describe(ours)} " if ours is not None else "what it read: "
                raise CommitConflict(
                    f"commit conflict on {obj}: this transaction's {mine}conflicts with "
                    f"{actions.describe(their)} committed in version {version}",
                    object_name=obj, version=version)
        return Snapshot(self.files, latest)


def _str_map(values: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (values or {}).items()}


def _alter_properties(current: Mapping[str, str], set_properties: Mapping[str, str] | None,
                      unset_properties: Sequence[str]) -> tuple[dict[str, str],
                                                                tuple[list[str], list[str]]]:
    props = dict(current)
    overlap = set(set_properties or {}) & set(unset_properties)
    if overlap:
        raise InvalidArgumentError(f"properties both set and unset: {', '.join(sorted(overlap))}")
    set_keys = [k for k, v in _str_map(set_properties).items() if props.get(k) != v]
    props.update(_str_map(set_properties))
    unset_keys = [k for k in unset_properties if k in props]
    for key in unset_keys:
        del props[key]
    return props, (set_keys, unset_keys)
