"""The catalog read API (pyiceberg names), over a version's tree or a transaction's view."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import compress, islice
from typing import TYPE_CHECKING, NoReturn, TypeVar

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.files import CatalogFiles, Root
from olympia.catalog.keys import PREFIX, KeyCodec, ObjectRef, ObjectType
from olympia.catalog.objects import Namespace, Table, View, as_identifier
from olympia.exceptions import (
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    NotFoundError,
    ReadOnlyError,
)
from olympia.tree import btree

Identifier = str | tuple[str, str]
M = TypeVar("M", pb.NamespaceDef, pb.TableDef, pb.ViewDef)


class CatalogReader(ABC):
    """Reads of one consistent state of a catalog."""

    files: CatalogFiles
    codec: KeyCodec

    @abstractmethod
    def _get(self, ref: ObjectRef) -> str | None:
        """Definition file path of an object, or None."""

    @abstractmethod
    def _scan(self, kind: ObjectType, namespace: str | None) -> Iterator[tuple[str, str]]:
        """(key, def path) of every object of ``kind`` (in ``namespace``), in key order."""

    # --- namespaces ----------------------------------------------------------------------

    def list_namespaces(self) -> list[str]:
        return [self.codec.decode(k).namespace for k, _ in self._scan(ObjectType.NAMESPACE, None)]

    def namespace_exists(self, namespace: str) -> bool:
        return self._get(ObjectRef(ObjectType.NAMESPACE, namespace)) is not None

    def load_namespace(self, namespace: str) -> Namespace:
        ref = ObjectRef(ObjectType.NAMESPACE, namespace)
        return Namespace.from_proto(self._require(ref, pb.NamespaceDef))

    def load_namespace_properties(self, namespace: str) -> dict[str, str]:
        return dict(self.load_namespace(namespace).properties)

    # --- tables and views ---------------------------------------------------------------

    def list_tables(self, namespace: str) -> list[str]:
        return self._list_children(ObjectType.TABLE, namespace)

    def table_exists(self, identifier: Identifier, name: str | None = None) -> bool:
        return self._get(_ref(ObjectType.TABLE, identifier, name)) is not None

    def load_table(self, identifier: Identifier, name: str | None = None) -> Table:
        ref = _ref(ObjectType.TABLE, identifier, name)
        return self.files.read_table(self._require_path(ref), ref.namespace, ref.name,
                                     lambda path: self._read_defs([path], pb.TableDef)[0])

    def list_views(self, namespace: str) -> list[str]:
        return self._list_children(ObjectType.VIEW, namespace)

    def view_exists(self, identifier: Identifier, name: str | None = None) -> bool:
        return self._get(_ref(ObjectType.VIEW, identifier, name)) is not None

    def load_view(self, identifier: Identifier, name: str | None = None) -> View:
        ref = _ref(ObjectType.VIEW, identifier, name)
        return View.from_proto(self._require(ref, pb.ViewDef), ref.namespace, ref.name)

    def table_definitions(self, paths: list[str]) -> list[pb.TableDef]:
        """The table definitions at ``paths`` (from :meth:`names`), not decoded,
        the uncached ones read concurrently.

        Raises:
            CorruptFileError: A file is not a valid table definition.
        """
        return self._read_defs(paths, pb.TableDef)

    def definition_path(self, ref: ObjectRef) -> str | None:
        """The object's definition file (None if absent); a new path means a new definition."""
        return self._get(ref)

    # --- pages: one key range of the tree -------------------------------------------------

    def names(self, kind: ObjectType, namespace: str | None = None, after: str | None = None,
              prefix: str = "") -> Iterator[tuple[str, str]]:
        """The namespaces (``kind`` NAMESPACE, ``namespace`` None), or the tables or views of
        ``namespace``, by name, without reading their definitions.

        Args:
            kind: What to list.
            namespace: The namespace whose tables or views to list (None for namespaces).
            after: Only names after this cursor (any string; None: from the first).
            prefix: Only names that start with this.

        Returns:
            (name, definition file path) in name order, read as iterated: a caller that
            stops early reads only the tree nodes it passed (a reader over one tree starts
            at the cursor's key).

        Raises:
            NoSuchNamespaceError: ``namespace`` does not exist.
        """
        if namespace is not None and not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"namespace {namespace} does not exist")
        keys = self._key_range(kind, namespace, after, prefix)
        if namespace is None:
            named = ((self.codec.decode(key).namespace, path) for key, path in keys)
        else:  # every key of the range is the namespace's prefix and a name padded with
            # spaces, which no name holds: the name ends at the first space
            start = len(self.codec.children_prefix(kind, namespace))
            named = ((key[start:].partition(" ")[0], path) for key, path in keys)
        if after is None and not prefix:
            return named
        return ((name, path) for name, path in named
                if (after is None or name > after) and name.startswith(prefix))

    def names_page(self, kind: ObjectType, namespace: str | None, after: str | None,
                   limit: int | None,
                   keep: Callable[[list[tuple[str, str]]], list[bool]] | None = None,
                   ) -> NamePage:
        """One page of :meth:`names`: the cursor paging of every listing (the REST
        catalog's and the UI's). The page reads the tree's keys from the cursor to one name
        past its end (to know whether more follow), and no definition.

        Args:
            kind: What to list.
            namespace: The namespace whose tables or views to list (None for namespaces).
            after: The cursor: where the previous page ended (None: the first page).
            limit: The most names on the page (None: every name after the cursor).
            keep: Which of a batch of (name, path) the listing shows (None: all), for a
                listing of some of the objects (an Iceberg catalog's tables); it is given
                the names in batches no larger than the page still needs (plus one) and at
                most :data:`PAGE_BATCH`.

        Returns:
            The page and the cursor of the next one.

        Raises:
            NoSuchNamespaceError: ``namespace`` does not exist.
            ValueError: ``limit`` is below 1.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"a page holds at least one name, not {limit}")
        entries = self.names(kind, namespace, after)
        found: list[tuple[str, str]] = []
        while limit is None or len(found) <= limit:
            want = PAGE_BATCH if limit is None else min(PAGE_BATCH, limit + 1 - len(found))
            batch = list(islice(entries, want))
            if not batch:
                break
            found += batch if keep is None else compress(batch, keep(batch))
        if limit is None or len(found) <= limit:
            return NamePage(found, None)
        return NamePage(found[:limit], found[limit - 1][0])

    def refs_after(self, kind: ObjectType, after: ObjectRef | None = None,
                   ) -> Iterator[tuple[ObjectRef, str]]:
        """The tables (or views) of every namespace after ``after``, in namespace then name
        order, without reading their definitions (a catalog-wide listing's pages).

        Args:
            kind: TABLE or VIEW.
            after: The cursor: only objects after this one (None: from the first).

        Returns:
            (ref, definition file path), read as iterated (a reader over one tree starts at
            the cursor's key).
        """
        found = ((self.codec.decode(key), path) for key, path in self._refs_range(kind, after))
        return ((ref, path) for ref, path in found
                if after is None or (ref.namespace, ref.name) > (after.namespace, after.name))

    def _refs_range(self, kind: ObjectType, after: ObjectRef | None,
                    ) -> Iterator[tuple[str, str]]:
        """(key, path) of at least the objects :meth:`refs_after` lists, in key order."""
        return self._scan(kind, None)

    def _key_range(self, kind: ObjectType, namespace: str | None, after: str | None,
                   prefix: str) -> Iterator[tuple[str, str]]:
        """(key, path) of the objects :meth:`names` lists, in key order: at least the keys
        of the names after ``after`` that start with ``prefix`` (it filters the rest)."""
        return self._scan(kind, namespace)

    # --- whole-catalog reads ---------------------------------------------------------------

    def objects(self) -> Iterator[tuple[ObjectRef, str]]:
        """Every object with its definition file path, namespaces then tables then views."""
        for kind in (ObjectType.NAMESPACE, ObjectType.TABLE, ObjectType.VIEW):
            for key, path in self._scan(kind, None):
                yield self.codec.decode(key), path

    def _defs(self, kind: ObjectType, cls: type[M], namespace: str | None,
              ) -> list[tuple[ObjectRef, M]]:
        """Objects of ``kind`` (in ``namespace``) with their definitions, read concurrently."""
        found = [(self.codec.decode(k), p) for k, p in self._scan(kind, namespace)]
        defs = self._read_defs([p for _, p in found], cls)
        return [(r, d) for (r, _), d in zip(found, defs, strict=True)]

    def load_all(self) -> tuple[list[Namespace], list[Table], list[View]]:
        """Every object, with definition files read concurrently."""
        tables, views = self._contents(None)
        namespaces = self._defs(ObjectType.NAMESPACE, pb.NamespaceDef, None)
        return [Namespace.from_proto(d) for _, d in namespaces], tables, views

    def load_namespace_contents(self, namespace: str) -> tuple[list[Table], list[View]]:
        """Every table and view of ``namespace``, definition files read concurrently."""
        return self._contents(namespace)

    def _contents(self, namespace: str | None) -> tuple[list[Table], list[View]]:
        return (
            [Table.from_proto(d, r.namespace, r.name)
             for r, d in self._defs(ObjectType.TABLE, pb.TableDef, namespace)],
            [View.from_proto(d, r.namespace, r.name)
             for r, d in self._defs(ObjectType.VIEW, pb.ViewDef, namespace)],
        )

    def object_paths(self, namespace: str) -> list[tuple[str, str]]:
        """(key, definition path) of a namespace and everything in it: a cheap fingerprint
        source, since definition paths change whenever an object changes."""
        rows = []
        own = self._get(ObjectRef(ObjectType.NAMESPACE, namespace))
        if own is not None:
            rows.append((self.codec.namespace_key(namespace), own))
            for kind in (ObjectType.TABLE, ObjectType.VIEW):
                rows.extend(self._scan(kind, namespace))
        return rows

    # --- helpers -------------------------------------------------------------------------

    def _list_children(self, kind: ObjectType, namespace: str) -> list[str]:
        if not self.namespace_exists(namespace):
            raise NoSuchNamespaceError(f"namespace {namespace} does not exist")
        return [self.codec.decode(k).name for k, _ in self._scan(kind, namespace)]

    def _require(self, ref: ObjectRef, cls: type[M]) -> M:
        return self._read_defs([self._require_path(ref)], cls)[0]

    def _require_path(self, ref: ObjectRef) -> str:
        """The path of ``ref``'s definition file.

        Raises:
            NotFoundError: It does not exist (the subclass for its kind: :func:`missing`).
        """
        path = self._get(ref)
        if path is None:
            raise missing(ref)
        return path

    def _read_defs(self, paths: list[str], cls: type[M]) -> list[M]:
        """Definition files by path, uncached ones read concurrently."""
        return self.files.read_defs(paths, cls)

    def _prefix(self, kind: ObjectType, namespace: str | None) -> str:
        return PREFIX[kind] if namespace is None else self.codec.children_prefix(kind, namespace)


#: The most names :meth:`CatalogReader.names_page` hands to ``keep`` at once.
PAGE_BATCH = 256


@dataclass(frozen=True)
class NamePage:
    """One page of a listing by name (:meth:`CatalogReader.names_page`).

    Args:
        entries: (name, definition file path) of the page, in name order.
        next_after: The cursor of the next page, the page's last name (None: the last page).
    """

    entries: list[tuple[str, str]]
    next_after: str | None

    @property
    def names(self) -> list[str]:
        """The names of the page."""
        return [name for name, _ in self.entries]


_MISSING: dict[ObjectType, type[NotFoundError]] = {
    ObjectType.NAMESPACE: NoSuchNamespaceError,
    ObjectType.TABLE: NoSuchTableError,
    ObjectType.VIEW: NoSuchViewError,
}


def missing(ref: ObjectRef) -> NotFoundError:
    """The precise "does not exist" error for ``ref`` (NoSuchTableError for a table, ...)."""
    return _MISSING.get(ref.type, NotFoundError)(f"{ref.label} does not exist")


def _ref(kind: ObjectType, identifier: Identifier, name: str | None) -> ObjectRef:
    namespace, obj = as_identifier(identifier, name)
    return ObjectRef(kind, namespace, obj)


class Snapshot(CatalogReader):
    """A read-only view of one catalog version."""

    def __init__(self, files: CatalogFiles, root: Root) -> None:
        self.files = files
        self.root = root
        self.codec = files.codec(root.catalog_def)
        self.nodes = files.nodes(root.catalog_def.order)

    @property
    def version(self) -> int:
        return self.root.version

    @property
    def catalog_def(self) -> pb.CatalogDef:
        return self.root.catalog_def

    @property
    def created_at_millis(self) -> int:
        return self.root.created_at_millis

    def _get(self, ref: ObjectRef) -> str | None:
        return btree.get(self.nodes, self.root.node, self.codec.key(ref))

    def _scan(self, kind: ObjectType, namespace: str | None) -> Iterator[tuple[str, str]]:
        return btree.scan_prefix(self.nodes, self.root.node, self._prefix(kind, namespace))

    def _refs_range(self, kind: ObjectType, after: ObjectRef | None,
                    ) -> Iterator[tuple[str, str]]:
        # padded namespaces and names keep keys in (namespace, name) order
        low = PREFIX[kind] if after is None else self.codec.key(ObjectRef(
            kind, after.namespace, after.name))
        return btree.scan(self.nodes, self.root.node, low, btree.prefix_end(PREFIX[kind]))

    def _key_range(self, kind: ObjectType, namespace: str | None, after: str | None,
                   prefix: str) -> Iterator[tuple[str, str]]:
        # a key is its kind's (and namespace's) prefix and the name padded with spaces,
        # which sort below every character a name may hold: the key of every name after
        # ``after`` is at least the prefix followed by ``after``
        keys = self._prefix(kind, namespace)
        low = keys + (prefix if after is None or after < prefix else after)
        return btree.scan(self.nodes, self.root.node, low, btree.prefix_end(keys + prefix))

    def actions(self) -> list[apb.ActionDef]:
        """The actions of the transaction that produced this version."""
        where = self.files.storage.display(self.root.path)
        return [actions.decode_row(value, where) for _, value in self.root.node.actions]

    def depth(self) -> int:
        return btree.depth(self.nodes, self.root.node)

    if not TYPE_CHECKING:  # type checkers see no write methods at all
        def __getattr__(self, name: str) -> Callable[..., NoReturn]:
            """The write methods a :class:`Catalog` has exist here only to refuse, by name."""
            if name not in WRITE_METHODS:
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {name!r}")

            def refuse(*args: object, **kwargs: object) -> NoReturn:
                raise ReadOnlyError(
                    f"version {self.version} is a read-only view of the catalog: {name} is "
                    f"refused; write through the latest catalog")
            return refuse


# Catalog methods that change the catalog; a Snapshot refuses each with ReadOnlyError.
WRITE_METHODS = frozenset({
    "transaction", "create_namespace", "alter_namespace", "drop_namespace", "rename_namespace",
    "create_table", "alter_table", "drop_table", "rename_table", "create_view", "replace_view",
    "drop_view", "rename_view",
})
