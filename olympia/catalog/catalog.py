"""The Catalog: create or open a catalog at a URI, read it, and change it in transactions.

Over 400 lines for one reason: each one-shot write method (``create_table`` and eleven
more) is written out with its full signature and docstring, so type checkers, ``help()`` and
IDEs see the real parameters; each body is one transaction calling the same-named
:class:`Transaction` method.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Self

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions, distributed
from olympia.catalog.actions import A
from olympia.catalog.commit import DEFAULT_COMMIT_TIMEOUT_S, CommitOptions, now_millis
from olympia.catalog.distributed import DistributedTransaction, Requirement
from olympia.catalog.files import LATEST, CatalogFiles, Root, root_digest
from olympia.catalog.keys import ObjectRef, ObjectType, def_path, version_path
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import CatalogReader, Identifier, Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import (
    AlreadyExistsError,
    FileAlreadyExists,
    InvalidArgumentError,
    NoSuchVersionError,
    VersionExpiredError,
)
from olympia.storage import Storage
from olympia.tree.node import Node, encode_node

FORMAT_MAJOR_VERSION = 1
DEFAULT_ORDER = 128
DEFAULT_NAME_MAX_BYTES = 100
DEFAULT_TXN_TTL_MILLIS = 3 * 24 * 3600 * 1000
ISOLATION_LEVELS = {"SNAPSHOT": pb.SNAPSHOT, "SERIALIZABLE": pb.SERIALIZABLE}


def isolation_level(value: str | int) -> int:
    if isinstance(value, int) and value in ISOLATION_LEVELS.values():
        return value
    level = ISOLATION_LEVELS.get(str(value).upper())
    if level is None:
        raise InvalidArgumentError(
            f"unknown isolation level {value!r}; use SNAPSHOT or SERIALIZABLE")
    return level


class Catalog(CatalogReader):
    """An Olympia catalog under one storage prefix.

    Reads see the version this object has loaded (:attr:`version`): the latest when it was
    opened, refreshed by :meth:`refresh` and by every commit made through it.
    """

    def __init__(self, files: CatalogFiles, root: Root,
                 commit_timeout: float = DEFAULT_COMMIT_TIMEOUT_S,
                 coalesce_commits: bool = False) -> None:
        self.files = files
        #: How commits made through this catalog retry after losing the root race; its
        #: ``timeout_s`` and ``coalesce`` are the ``commit_timeout`` and ``coalesce_commits``
        #: given to :meth:`open` or :meth:`create`.
        self.commit_options = CommitOptions(timeout_s=commit_timeout, coalesce=coalesce_commits)
        self.storage = files.storage
        self._lock = threading.Lock()
        self._snapshot = Snapshot(files, root)
        self.codec = self._snapshot.codec
        self._requirements: list[Requirement] = []

    def __repr__(self) -> str:
        return f"Catalog({self.uri!r}, version={self.version})"

    @property
    def uri(self) -> str:
        return self.storage.uri

    # --- create and open -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        uri: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        order: int = DEFAULT_ORDER,
        namespace_name_max_size_bytes: int = DEFAULT_NAME_MAX_BYTES,
        table_name_max_size_bytes: int = DEFAULT_NAME_MAX_BYTES,
        view_name_max_size_bytes: int = DEFAULT_NAME_MAX_BYTES,
        node_file_max_size_bytes: int = 0,
        properties: Mapping[str, str] | None = None,
        txn_ttl_millis: int = DEFAULT_TXN_TTL_MILLIS,
        txn_isolation_level: str | int = "SNAPSHOT",
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT_S,
        coalesce_commits: bool = False,
    ) -> Catalog:
        """Write version 0 (an empty tree and the catalog definition) at ``uri``.

        ``commit_timeout`` and ``coalesce_commits`` are as in :meth:`open` (this process's
        settings, not stored).
        """
        if order < 3:
            raise InvalidArgumentError(f"order must be at least 3, got {order}")
        for name, size in (("namespace", namespace_name_max_size_bytes),
                           ("table", table_name_max_size_bytes),
                           ("view", view_name_max_size_bytes)):
            if not 1 <= size <= 1024:
                raise InvalidArgumentError(f"{name}_name_max_size_bytes must be 1..1024")
        catalog_def = pb.CatalogDef(
            id=str(uuid.uuid4()), major_version=FORMAT_MAJOR_VERSION, order=order,
            namespace_name_max_size_bytes=namespace_name_max_size_bytes,
            table_name_max_size_bytes=table_name_max_size_bytes,
            view_name_max_size_bytes=view_name_max_size_bytes,
            node_file_max_size_bytes=node_file_max_size_bytes,
            properties={str(k): str(v) for k, v in (properties or {}).items()},
            txn_ttl_millis=txn_ttl_millis,
            txn_isolation_level=isolation_level(txn_isolation_level),  # type: ignore[arg-type]
        )
        storage = Storage(uri, storage_options)
        files = CatalogFiles(storage)
        content = catalog_def.SerializeToString(deterministic=True)
        cdef_path = def_path(None, content)
        codec = files.codec(catalog_def)
        row = actions.encode_row(codec, actions.make(A.CATALOG_CREATE, None, cdef_path))
        root = Node((), (), None, now_millis(), catalog_def=cdef_path, actions=(row,))
        root_bytes = encode_node(root, order)
        try:
            storage.publish({cdef_path: content}, version_path(0), root_bytes)
        except FileAlreadyExists:
            storage.delete(cdef_path)
            raise AlreadyExistsError(f"a catalog already exists at {storage.uri}") from None
        files.write_hint(LATEST, 0)
        files.remember_def(cdef_path, catalog_def)
        return cls(files, Root(0, version_path(0), root, catalog_def, root_digest(root_bytes)),
                   commit_timeout,
                   coalesce_commits)

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, Any] | None = None, *,
             commit_timeout: float = DEFAULT_COMMIT_TIMEOUT_S,
             coalesce_commits: bool = False) -> Catalog:
        """Open the latest version of the catalog at ``uri``.

        Args:
            uri: The catalog's location (a local path, ``s3://...``, ``memory://...``).
            storage_options: Options of the storage backend (credentials, endpoint).
            commit_timeout: Seconds a commit keeps retrying while other writers win the
                race for the next version before it gives up with CommitConflict (a
                setting of this process, not of the catalog).
            coalesce_commits: Commits that threads make at the same time through this
                object go through its queue and may land together in one version when
                their changes are disjoint; each caller still gets its own outcome.
                Without it each commit runs the protocol in its caller's thread, racing
                the others as separate writers do (docs/ARCHITECTURE.md, "Life of a
                commit").

        Raises:
            NoSuchCatalogError: There is no catalog at ``uri``.
        """
        files = CatalogFiles(Storage(uri, storage_options))
        return cls(files, files.discover_latest(), commit_timeout, coalesce_commits)

    @classmethod
    def exists_at(cls, uri: str, storage_options: Mapping[str, Any] | None = None) -> bool:
        """Whether a catalog has been created at ``uri``."""
        storage = Storage(uri, storage_options)
        return storage.exists(version_path(0)) or storage.exists("vn/oldest")

    # --- the loaded version ----------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def catalog_def(self) -> pb.CatalogDef:
        return self._snapshot.catalog_def

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.catalog_def.properties)

    def refresh(self) -> int:
        """Load the latest version and return it (what the store holds: after a restore
        from an earlier copy, an older version than the one loaded before)."""
        latest = self.files.discover_latest(self._snapshot.root)
        with self._lock:
            if latest is not self._snapshot.root:
                self._snapshot = Snapshot(self.files, latest)
        return self.version

    def _advance(self, root: Root) -> None:
        """A commit made through this object landed ``root``."""
        with self._lock:
            if root.version >= self._snapshot.version:
                self._snapshot = Snapshot(self.files, root)

    def _get(self, ref: ObjectRef) -> str | None:
        return self._snapshot._get(ref)

    def _scan(self, kind: ObjectType, namespace: str | None) -> Any:
        return self._snapshot._scan(kind, namespace)

    def at_version(self, version: int) -> Snapshot:
        """A read-only view of ``version``."""
        oldest = self.files.oldest_version()
        if version < oldest:
            raise VersionExpiredError(
                f"version {version} has expired; the oldest kept version is {oldest}")
        if version > self.version and version > self.refresh():
            raise NoSuchVersionError(f"version {version} does not exist; latest is {self.version}")
        return Snapshot(self.files, self.files.read_root(version))

    # --- writes ----------------------------------------------------------------------------

    def transaction(self, isolation: str | int | None = None, *,
                    base: Snapshot | None = None, name: str | None = None) -> Transaction:
        """Begin a transaction, on the latest version unless ``base`` is given.

        ``with catalog.transaction() as txn:`` commits on exit, or discards everything if
        the block raises. A commit advances this catalog's loaded version.

        Args:
            isolation: ``SNAPSHOT`` or ``SERIALIZABLE`` (default: the catalog's level).
            base: A snapshot of this catalog to begin on (reads see that version; a commit
                checks every version committed since it for conflicts). Nothing is
                refreshed when it is given.
            name: The id of a distributed transaction (:meth:`begin_transaction`): the
                transaction returned is a statement of it, reading its running view, and
                its commit adds to it instead of making a version (``isolation`` and
                ``base`` must then be left out).

        Returns:
            The open transaction.

        Raises:
            InvalidArgumentError: ``base`` is a snapshot of another Catalog object, or
                ``name`` is given with ``isolation`` or ``base``.
            NoSuchTransactionError: There is no distributed transaction ``name``.
            TransactionExpiredError: It expired.
        """
        if name is not None:
            if isolation is not None or base is not None:
                raise InvalidArgumentError("a statement of a distributed transaction takes "
                                           "its isolation and beginning from it")
            return self.distributed_transaction(name).statement()
        if base is None:
            self.refresh()
            base = self._snapshot
        elif base.files is not self.files:
            raise InvalidArgumentError("base must be a snapshot of this catalog (from its "
                                       "snapshot or at_version)")
        level = base.catalog_def.txn_isolation_level if isolation is None else (
            isolation_level(isolation))
        return Transaction(self.files, base, level, on_commit=self._advance,
                           options=self.commit_options)


    def begin_transaction(self, name: str | None = None, *, ttl_millis: int | None = None,
                          isolation: str | int | None = None,
                          info: Mapping[str, str] | None = None) -> DistributedTransaction:
        """Begin a distributed transaction on the latest version: statements from any
        process add to it (:meth:`transaction` with ``name``), and its commit lands them
        all as ONE version.

        Args:
            name: Its id (letters, digits, ``-``, ``_``, ``.``); default a random UUID.
            ttl_millis: How long it may stay open (default: the catalog's
                ``txn_ttl_millis``).
            isolation: Only ``SNAPSHOT``: SERIALIZABLE cannot be honoured, since the
                record has no place for the statements' reads.
            info: Annotations recorded with the version it commits (who, which job).

        Returns:
            The transaction.

        Raises:
            AlreadyExistsError: A transaction ``name`` is open.
            InvalidArgumentError: SERIALIZABLE isolation, or a TTL that is not positive.
            InvalidNameError: ``name`` is not a valid id.
        """
        if isolation is not None and isolation_level(isolation) != pb.SNAPSHOT:
            raise InvalidArgumentError(
                "a distributed transaction cannot be SERIALIZABLE: its record has no place "
                "for what its statements read, so its commit could not check those reads; "
                "use SNAPSHOT, or one catalog.transaction('SERIALIZABLE') in one process")
        self.refresh()
        return distributed.begin(self.files, self._snapshot, self.commit_options,
                                 self._advance, self._requirements, txn_id=name,
                                 ttl_millis=ttl_millis, info=info)

    def distributed_transaction(self, name: str) -> DistributedTransaction:
        """The distributed transaction ``name``, to add statements to, commit or abort.

        Raises:
            NoSuchTransactionError: There is none (committed, aborted or never begun).
        """
        read = distributed.read_record(self.files, distributed.check_transaction_id(name))
        return DistributedTransaction(self.files, read, self.commit_options, self._advance,
                                      self._requirements)

    def require_on_landing(self, requirement: Requirement) -> None:
        """Hold every distributed transaction this object lands from now on (its commit,
        a resumed one) to ``requirement``, a rule of a layer above the catalog (the
        Iceberg layer's: no two live tables share files); adding one twice adds it once.

        Args:
            requirement: Called with the landing transaction before it commits
                (:data:`~olympia.catalog.distributed.Requirement`).
        """
        if requirement not in self._requirements:
            self._requirements.append(requirement)

    # --- one-shot changes, each in a transaction (and a version) of its own ---------------

    def create_namespace(self, namespace: str, properties: Mapping[str, str] | None = None,
                         comment: str = "", protected: bool = False) -> Namespace:
        """Create a namespace.

        Args:
            namespace: The namespace name (format naming rules apply).
            properties: String properties stored with the namespace.
            comment: A free-text description.
            protected: Refuse drops of this namespace (plans never drop it).

        Returns:
            The created namespace.

        Raises:
            AlreadyExistsError: The namespace exists.
            InvalidNameError: The name breaks the naming rules.
            CommitConflict: A concurrent commit created the same namespace.
        """
        with self.transaction() as txn:
            return txn.create_namespace(namespace, properties, comment, protected)

    def alter_namespace(self, namespace: str, set_properties: Mapping[str, str] | None = None,
                        unset_properties: Sequence[str] = (), comment: str | None = None,
                        protected: bool | None = None) -> Namespace:
        """Change a namespace's properties, comment or protected flag (None keeps it).

        Args:
            namespace: The namespace to change.
            set_properties: Properties to add or overwrite.
            unset_properties: Property names to remove.
            comment: The new comment.
            protected: The new protected flag.

        Returns:
            The namespace as changed (unchanged, and no version written, if nothing differs).

        Raises:
            NoSuchNamespaceError: The namespace does not exist.
            CommitConflict: A concurrent commit changed the namespace.
        """
        with self.transaction() as txn:
            return txn.alter_namespace(namespace, set_properties, unset_properties, comment,
                                       protected)

    def drop_namespace(self, namespace: str, cascade: bool = False) -> None:
        """Drop a namespace, and with ``cascade`` every table and view in it.

        Raises:
            NoSuchNamespaceError: The namespace does not exist.
            NamespaceNotEmptyError: It holds objects and ``cascade`` is False.
            ProtectedObjectError: The namespace (or, with cascade, an object in it) is
                protected.
        """
        with self.transaction() as txn:
            txn.drop_namespace(namespace, cascade)

    def rename_namespace(self, namespace: str, new_name: str) -> Namespace:
        """Rename a namespace, moving its tables and views with it.

        Returns:
            The renamed namespace.

        Raises:
            NoSuchNamespaceError: ``namespace`` does not exist.
            AlreadyExistsError: ``new_name`` exists.
        """
        with self.transaction() as txn:
            return txn.rename_namespace(namespace, new_name)

    def create_table(self, identifier: Identifier, name: str | None = None,
                     columns: Sequence[Column | Mapping[str, Any]] = (),
                     properties: Mapping[str, str] | None = None, *, format: str = "iceberg",
                     table_type: str = "external", location: str = "",
                     format_properties: Mapping[str, str] | None = None, comment: str = "",
                     protected: bool = False) -> Table:
        """Create a table.

        Args:
            identifier: ``"ns.table"``, ``("ns", "table")``, or the namespace with ``name``.
            name: The table name when ``identifier`` is only the namespace.
            columns: :class:`Column` objects or mappings such as
                ``{"name": "id", "type": "int8", "nullable": False}``; ids are assigned.
            properties: String table properties.
            format: The table format (``iceberg``, ``delta``, ``parquet``, ...).
            table_type: ``external`` or ``managed``.
            location: The format's location, e.g. an Iceberg metadata file.
            format_properties: Format-specific string properties.
            comment: A free-text description.
            protected: Refuse drops of this table.

        Returns:
            The created table.

        Raises:
            NoSuchNamespaceError: The namespace does not exist.
            AlreadyExistsError: A table or view of that name exists.
            InvalidNameError: A name breaks the naming rules.
            InvalidArgumentError: A column is malformed.
        """
        with self.transaction() as txn:
            return txn.create_table(identifier, name, columns, properties, format=format,
                                    table_type=table_type, location=location,
                                    format_properties=format_properties, comment=comment,
                                    protected=protected)

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
        """Change a table; column changes apply in the order remove, rename, update, add,
        reorder (see :meth:`Transaction.alter_table`). None leaves an attribute as it is.

        Returns:
            The table as changed (unchanged, and no version written, if nothing differs).

        Raises:
            NoSuchTableError: The table does not exist.
            NoSuchColumnError: A removed, renamed or updated column does not exist.
            AlreadyExistsError: An added or renamed column's name is taken.
            InvalidArgumentError: ``column_order`` does not list exactly the columns.
        """
        with self.transaction() as txn:
            return txn.alter_table(
                identifier, name, set_properties=set_properties,
                unset_properties=unset_properties, add_columns=add_columns,
                remove_columns=remove_columns, rename_columns=rename_columns,
                update_columns=update_columns, column_order=column_order, comment=comment,
                location=location, format_properties=format_properties, protected=protected)

    def drop_table(self, identifier: Identifier, name: str | None = None) -> None:
        """Drop a table (its definition; the format's data files are not touched).

        Raises:
            NoSuchTableError: The table does not exist.
            ProtectedObjectError: The table is protected.
        """
        with self.transaction() as txn:
            txn.drop_table(identifier, name)

    def rename_table(self, identifier: Identifier, new_name: str) -> Table:
        """Rename a table within its namespace.

        Returns:
            The renamed table.

        Raises:
            NoSuchTableError: The table does not exist.
            AlreadyExistsError: A table or view named ``new_name`` exists.
        """
        with self.transaction() as txn:
            return txn.rename_table(identifier, new_name)

    def create_view(self, identifier: Identifier, name: str | None = None, sql: str = "", *,
                    dialect: str = "ansi", columns: Sequence[Column | Mapping[str, Any]] = (),
                    referenced_objects: Sequence[Identifier] = (), default_namespace: str = "",
                    properties: Mapping[str, str] | None = None, comment: str = "",
                    protected: bool = False) -> View:
        """Create a view.

        Args:
            identifier: ``"ns.view"``, ``("ns", "view")``, or the namespace with ``name``.
            name: The view name when ``identifier`` is only the namespace.
            sql: The view's query text (required).
            dialect: The SQL dialect of ``sql``.
            columns: The declared output columns.
            referenced_objects: Tables and views the query reads; each must exist.
            default_namespace: The namespace unqualified names in ``sql`` resolve in.
            properties: String view properties.
            comment: A free-text description.
            protected: Refuse drops of this view.

        Returns:
            The created view.

        Raises:
            NoSuchNamespaceError: The namespace does not exist.
            NotFoundError: A referenced object does not exist.
            AlreadyExistsError: A table or view of that name exists.
            InvalidArgumentError: ``sql`` is empty or a column is malformed.
        """
        with self.transaction() as txn:
            return txn.create_view(identifier, name, sql, dialect=dialect, columns=columns,
                                   referenced_objects=referenced_objects,
                                   default_namespace=default_namespace, properties=properties,
                                   comment=comment, protected=protected)

    def replace_view(self, identifier: Identifier, name: str | None = None, sql: str = "", *,
                     dialect: str = "ansi", columns: Sequence[Column | Mapping[str, Any]] = (),
                     referenced_objects: Sequence[Identifier] = (),
                     default_namespace: str = "", properties: Mapping[str, str] | None = None,
                     comment: str = "", protected: bool = False) -> View:
        """Replace a view's whole definition (arguments as :meth:`create_view`).

        Returns:
            The new view (the old one, and no version written, if nothing differs).

        Raises:
            NoSuchViewError: The view does not exist.
            NotFoundError: A referenced object does not exist.
        """
        with self.transaction() as txn:
            return txn.replace_view(identifier, name, sql, dialect=dialect, columns=columns,
                                    referenced_objects=referenced_objects,
                                    default_namespace=default_namespace,
                                    properties=properties, comment=comment, protected=protected)

    def drop_view(self, identifier: Identifier, name: str | None = None) -> None:
        """Drop a view.

        Raises:
            NoSuchViewError: The view does not exist.
            ProtectedObjectError: The view is protected.
        """
        with self.transaction() as txn:
            txn.drop_view(identifier, name)

    def rename_view(self, identifier: Identifier, new_name: str) -> View:
        """Rename a view within its namespace.

        Returns:
            The renamed view.

        Raises:
            NoSuchViewError: The view does not exist.
            AlreadyExistsError: A table or view named ``new_name`` exists.
        """
        with self.transaction() as txn:
            return txn.rename_view(identifier, new_name)

    # --- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the storage's thread pool; the object must not be used afterwards.

        ``with Catalog.open(uri) as catalog:`` closes on exit.
        """
        self.storage.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()
