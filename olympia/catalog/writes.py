"""The object write vocabulary of a transaction: namespaces, tables and views.

Each method validates against the state the transaction reads (its own staged writes
included) and stages its change through three primitives the transaction provides:
:meth:`ObjectWrites._put` (a new definition), :meth:`ObjectWrites._delete` and
:meth:`ObjectWrites._record` (an action). Column changes are the pure function
:func:`olympia.catalog.columns.change_columns`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from google.protobuf.message import Message

from olympia._proto import actions_pb2 as apb
from olympia.catalog.actions import A
from olympia.catalog.columns import change_columns
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import (
    Column,
    Namespace,
    Table,
    View,
    as_identifier,
    assign_column_ids,
    coerce_columns,
)
from olympia.catalog.reader import CatalogReader, Identifier
from olympia.exceptions import (
    AlreadyExistsError,
    InvalidArgumentError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NotFoundError,
    ProtectedObjectError,
)

NS, TABLE, VIEW = ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW


class ObjectWrites(CatalogReader):
    """Creates, alters, renames and drops namespaces, tables and views (staged, not
    committed: see :class:`olympia.catalog.transaction.Transaction`)."""

    @abstractmethod
    def _check_open(self) -> None:
        """Raise CatalogError unless changes may still be staged."""

    @abstractmethod
    def _put(self, ref: ObjectRef, message: Message) -> str:
        """Stage ``message`` as the definition of ``ref``; return its new file path."""

    @abstractmethod
    def _delete(self, ref: ObjectRef) -> None:
        """Stage the removal of ``ref``."""

    @abstractmethod
    def _record(self, type_: int, ref: ObjectRef | None, def_path_: str = "",
                **payload: Any) -> None:
        """Stage one action of this transaction."""

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
