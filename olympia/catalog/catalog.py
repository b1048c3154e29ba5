"""The Catalog: create or open a catalog at a URI, read it, and change it in transactions."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.files import LATEST, CatalogFiles, Root
from olympia.catalog.keys import ObjectRef, ObjectType, def_path, version_path
from olympia.catalog.reader import CatalogReader, Snapshot
from olympia.catalog.transaction import Transaction, now_millis
from olympia.exceptions import (
    AlreadyExistsError,
    FileAlreadyExists,
    InvalidArgumentError,
    NotFoundError,
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


def _one_shot(name: str) -> Callable[..., Any]:
    def method(self: Catalog, *args: Any, **kwargs: Any) -> Any:
        with self.transaction() as txn:
            return getattr(txn, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Run :meth:`Transaction.{name}` in a transaction of its own."
    return method


class Catalog(CatalogReader):
    """An Olympia catalog under one storage prefix.

    Reads see the version this object has loaded (:attr:`version`): the latest when it was
    opened, refreshed by :meth:`refresh` and by every commit made through it.
    """

    # Storage-level commit attempts before CommitConflict "other writers kept winning"; with
    # the jittered backoff between them (up to 1.28 s each) a writer under heavy contention
    # keeps trying for about 15 s rather than starving after a couple of seconds.
    commit_attempts = 25

    def __init__(self, files: CatalogFiles, root: Root) -> None:
        self.files = files
        self.storage = files.storage
        self._lock = threading.Lock()
        self._snapshot = Snapshot(files, root)
        self.codec = self._snapshot.codec

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
    ) -> Catalog:
        """Write version 0 (an empty tree and the catalog definition) at ``uri``."""
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
        cdef_path = def_path(None)
        storage.write(cdef_path, catalog_def.SerializeToString(deterministic=True))
        codec = files.codec(catalog_def)
        row = actions.encode_row(codec, actions.make(A.CATALOG_CREATE, None, cdef_path))
        root = Node((), (), None, now_millis(), catalog_def=cdef_path, actions=(row,))
        try:
            storage.create_exclusive(version_path(0), encode_node(root, order))
        except FileAlreadyExists:
            storage.delete(cdef_path)
            raise AlreadyExistsError(f"a catalog already exists at {storage.uri}") from None
        files.write_hint(LATEST, 0)
        files.remember_def(cdef_path, catalog_def)
        return cls(files, Root(0, version_path(0), root, catalog_def))

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, Any] | None = None) -> Catalog:
        """Open the latest version of the catalog at ``uri``."""
        files = CatalogFiles(Storage(uri, storage_options))
        return cls(files, files.discover_latest())

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
        """Load the latest version and return it."""
        self._advance(self.files.discover_latest())
        return self.version

    def _advance(self, root: Root) -> None:
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
            raise NotFoundError(
                f"version {version} has expired; the oldest kept version is {oldest}")
        if version > self.version and version > self.refresh():
            raise NotFoundError(f"version {version} does not exist; latest is {self.version}")
        return Snapshot(self.files, self.files.read_root(version))

    # --- writes ----------------------------------------------------------------------------

    def transaction(self, isolation: str | int | None = None) -> Transaction:
        """Begin a transaction on the latest version.

        ``with catalog.transaction() as txn:`` commits on exit, or discards everything if
        the block raises.
        """
        self.refresh()
        level = self.catalog_def.txn_isolation_level if isolation is None else (
            isolation_level(isolation))
        return Transaction(self, self._snapshot, level)


    # one-shot changes, each in a transaction of its own
    create_namespace = _one_shot("create_namespace")
    alter_namespace = _one_shot("alter_namespace")
    drop_namespace = _one_shot("drop_namespace")
    rename_namespace = _one_shot("rename_namespace")
    create_table = _one_shot("create_table")
    alter_table = _one_shot("alter_table")
    drop_table = _one_shot("drop_table")
    rename_table = _one_shot("rename_table")
    create_view = _one_shot("create_view")
    replace_view = _one_shot("replace_view")
    drop_view = _one_shot("drop_view")
    rename_view = _one_shot("rename_view")
