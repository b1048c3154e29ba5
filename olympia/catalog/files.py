"""Reading a catalog's files: roots, definitions, version hints, latest-version discovery."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from google.protobuf.message import DecodeError, Message

from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import (
    MAX_VERSION,
    KeyCodec,
    NameLimits,
    path_version,
    verify_def,
    version_path,
)
from olympia.catalog.objects import Table
from olympia.exceptions import (
    CorruptFileError,
    FileNotFound,
    NoSuchCatalogError,
    NoSuchVersionError,
    NotFoundError,
    StorageError,
)
from olympia.lru import LruCache
from olympia.storage import Storage
from olympia.tree.btree import NodeStore
from olympia.tree.node import Node, parse_node_file

M = TypeVar("M", bound=Message)

LATEST = "vn/latest"
OLDEST = "vn/oldest"
#: Decoded tables a catalog keeps (:meth:`CatalogFiles.read_table`).
TABLES = 8192


# Fields every writer sets (identity, and what a reader cannot do without): a definition
# lacking one, an empty file for instance, is corrupt rather than an object with defaults.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "CatalogDef": ("id", "major_version", "order"),
    "NamespaceDef": ("id",),
    "TableDef": ("id",),
    "ViewDef": ("id",),
    "DistributedTransactionDef": ("id", "beginning_root_node_file_path",
                                  "running_root_node_file_path", "expire_at_millis"),
}


def parse_def(data: bytes, where: str, cls: type[M]) -> M:
    """Parse a definition file; refuse an empty one, one whose content does not match the
    checksum in its name (ruling 13) or one without a required field.

    Args:
        data: the file's bytes.
        where: the file's path or display URI (named in errors; its last segment is the
            file name, which may carry the checksum).
        cls: the protobuf message the file holds.

    Raises:
        CorruptFileError: naming the file.
    """
    name = cls.__name__
    if not data:
        raise CorruptFileError(where, f"empty file, not a {name}")
    verify_def(data, where)
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(where, f"not a {name} ({exc})") from None
    missing = [f for f in REQUIRED_FIELDS.get(name, ()) if not getattr(message, f)]
    if missing:
        raise CorruptFileError(where, f"{name} without its required {', '.join(missing)}")
    return message


@dataclass(frozen=True)
class Root:
    """One version's root node with its catalog definition."""

    version: int
    path: str
    node: Node
    catalog_def: pb.CatalogDef
    digest: str = ""  # root_digest of the root file's bytes ("": not known)

    @property
    def created_at_millis(self) -> int:
        return self.node.created_at_millis


def root_digest(data: bytes) -> str:
    """What identifies a root file's content: a restored prefix may hold another root
    under the same name, and a version known in memory is trusted only while the store's
    root has this digest."""
    return hashlib.sha256(data).hexdigest()


class CatalogFiles:
    """Typed, cached access to the files of one catalog prefix.

    Node, definition and root files are immutable, so parsed copies are cached by path.
    """

    def __init__(self, storage: Storage, def_cache_size: int = 65536) -> None:
        self.storage = storage
        self._nodes: NodeStore | None = None
        self._defs: LruCache[str, Message] = LruCache(def_cache_size)
        # tables decoded from their definition files, by (path, namespace, name): the
        # files are immutable and so is a Table (its maps are read-only Mappings)
        self._tables: LruCache[tuple[str, str, str], Table] = LruCache(TABLES)
        self._roots: LruCache[str, Root] = LruCache(256)
        # root path -> (root_digest, the store's tag of a file read with that digest)
        self._tags: LruCache[str, tuple[str, str]] = LruCache(256)

    # --- definitions -------------------------------------------------------------------

    def read_def(self, path: str, cls: type[M]) -> M:
        cached = self._defs.get(path)
        if cached is None:
            cached = parse_def(self.storage.read(path), self.storage.display(path), cls)
            self.remember_def(path, cached)
        if not isinstance(cached, cls):
            raise CorruptFileError(self.storage.display(path), f"is not a {cls.__name__}")
        return cached

    def read_defs(self, paths: list[str], cls: type[M]) -> list[M]:
        """Read many definition files, the uncached ones as one batch
        (:meth:`~olympia.storage.Storage.map_requests`)."""
        missing = [p for p in dict.fromkeys(paths) if p not in self._defs]
        self.storage.map_requests(lambda p: self.read_def(p, cls), missing)
        return [self.read_def(p, cls) for p in paths]

    def remember_def(self, path: str, message: Message) -> None:
        self._defs.put(path, message)

    def read_table(self, path: str, namespace: str, name: str,
                   read: Callable[[str], pb.TableDef]) -> Table:
        """The table ``namespace.name`` decoded from its definition file at ``path``, once
        per catalog object: on a miss ``read`` reads the file (the reader's own read, so
        that a transaction remembers one that failed verification, ruling 13).

        Raises:
            CorruptFileError: The file is not a valid table definition.
        """
        key = (path, namespace, name)
        table = self._tables.get(key)
        if table is None:
            table = Table.from_proto(read(path), namespace, name)
            self._tables.put(key, table)
        return table

    # --- nodes and roots ---------------------------------------------------------------

    def nodes(self, order: int) -> NodeStore:
        if self._nodes is None or self._nodes.order != order:
            self._nodes = NodeStore(self.storage, order)
        return self._nodes

    def read_root(self, version: int, fresh: bool = False) -> Root:
        """The root of ``version``; NotFoundError if that version does not exist.
        ``fresh``: read from the store even if a root of that name was read before (what
        a commit builds on; a restored prefix may hold another root under that name); the
        root decoded before is kept only if the store's bytes have its digest."""
        path = version_path(version)
        cached = self._roots.get(path)
        if cached is not None and not fresh:
            return cached
        try:
            data = self._read_tagged(path, cached)
        except FileNotFound:
            raise NoSuchVersionError(
                f"version {version} does not exist in {self.storage.uri} ({path})"
            ) from None
        if data is None or (cached is not None and cached.digest == root_digest(data)):
            assert cached is not None
            return cached
        root = self._decode_root(version, path, data)
        self.remember_root(root)
        return root

    def _read_tagged(self, path: str, known: Root | None) -> bytes | None:
        """The bytes of the root file at ``path``, or None when it is still the file
        ``known`` was read from (one conditional request: the store's tag of the bytes
        last read with ``known``'s digest). The tag of what is read is kept with its
        digest.

        Raises:
            FileNotFound: there is no such file.
        """
        tagged = self._tags.get(path)
        tag = tagged[1] if known is not None and tagged and tagged[0] == known.digest else ""
        data, tag = self.storage.read_if_changed(path, tag)
        if data is not None and tag:
            self._tags.put(path, (root_digest(data), tag))
        return data

    def _decode_root(self, version: int, path: str, data: bytes) -> Root:
        where = self.storage.display(path)
        raw = parse_node_file(data, where)
        system = raw.system_rows()
        if "catalog_def" not in system:
            raise CorruptFileError(where, "root node without a catalog_def row")
        catalog_def = self.read_def(system["catalog_def"], pb.CatalogDef)
        if catalog_def.order < 3:
            raise CorruptFileError(self.storage.display(system["catalog_def"]),
                                   f"order {catalog_def.order} is below 3")
        node = raw.to_node(catalog_def.order, root=True)
        return Root(version, path, node, catalog_def, root_digest(data))

    def remember_root(self, root: Root, tag: str = "") -> None:
        """Keep ``root`` (decoded from the file at its path); ``tag``: the store's tag of
        that file (a root this process just created), so that discovery asks whether it
        changed with one conditional read (:meth:`_unchanged`)."""
        self._roots.put(root.path, root)
        if tag:
            self._tags.put(root.path, (root.digest, tag))

    # --- version hints and discovery ---------------------------------------------------

    def read_hint(self, path: str) -> int | None:
        """The version in vn/latest or vn/oldest: None when the file is absent or holds no
        version number (ASCII decimal in 0..MAX_VERSION, surrounding space allowed)."""
        return self._read_hint(path)[1]

    def _read_hint(self, path: str) -> tuple[bool, int | None]:
        """(whether the file exists, the version it holds if it holds one). A vn/latest
        that cannot be read at all (a folder of that name, a failing read) is ignored as
        one that holds no version number is: it is only a hint."""
        try:
            text = self.storage.read(path).decode("ascii", errors="replace").strip()
        except FileNotFound:
            return False, None
        except StorageError:
            if path != LATEST:
                raise
            return True, None
        if not (text.isdigit() and len(text) <= len(str(MAX_VERSION))
                and int(text) <= MAX_VERSION):
            return True, None  # only a hint: an unreadable one is ignored
        return True, int(text)

    def write_hint(self, path: str, version: int) -> None:
        """Write vn/latest or vn/oldest. vn/latest is not synced to disk: discovery probes
        past it and ignores one a crash lost or tore. vn/oldest is: roots below it may be
        gone, so an older value surviving a crash would name a missing root."""
        self.storage.write(path, f"{version}\n".encode("ascii"), durable=path != LATEST)

    def oldest_version(self) -> int:
        """The guaranteed oldest version: vn/oldest, or 0 when it is absent."""
        return self._oldest(*self._read_hint(OLDEST))

    def _oldest(self, present: bool, oldest: int | None) -> int:
        """When vn/oldest holds no version number, the safe reading is the lowest version
        whose root exists (one listing of ``vn/``): never a version expiry may have emptied;
        the next expiry run rewrites the file."""
        if oldest is not None or not present:
            return oldest or 0
        found = [v for f in self.storage.list("vn/") if (v := path_version(f.path)) is not None]
        return min(found, default=0)

    def discover_latest(self, known: Root | None = None) -> Root:
        """The latest root, found as the spec's procedure finds it (ruling 11).

        Start at vn/latest when it is above vn/oldest, else at vn/oldest (or 0), and return
        the version before the first missing one. Probing doubles its step and then
        bisects, which gives the same answer because versions above vn/oldest are
        contiguous; it never probes below the start. A vn/latest that holds no version
        number, or names a version that was never committed (neither it nor the one before
        exists), is ignored.

        Args:
            known: A version this process has seen (a catalog's loaded one). When its
                root's tag is known, the root (one conditional read: nothing is sent if
                it is still that file) and the version after it are asked about first
                (:meth:`_unchanged`), and ``known`` is returned if nothing changed.
                Otherwise they are asked about together with the hints: when neither
                hint is above ``known`` (vn/latest may lag: it is written after the
                root, best effort), the store's root of ``known`` is the one in memory
                (same digest) and the next version is missing, the procedure would stop
                at ``known`` (from wherever it starts, every version up to ``known`` is
                stored), so it is returned after one round trip, not two.

        Raises:
            NoSuchCatalogError: there is no root at all.
            CorruptFileError: vn/oldest names a version whose root does not exist.
        """
        if known is not None and self._unchanged(known):
            return known
        asks = [LATEST, OLDEST]
        if known is not None and known.digest and known.version < MAX_VERSION:
            asks += [known.path, version_path(known.version + 1)]

        def ask(path: str) -> object:
            if path in (LATEST, OLDEST):
                return self._read_hint(path)
            if path != asks[2]:
                return self.storage.probe(path)
            assert known is not None  # (asked about only then)
            try:
                data = self._read_tagged(path, known)
            except FileNotFound:
                return None
            return known.digest if data is None else root_digest(data)

        answers = self.storage.map_requests(ask, asks)
        latest = cast(tuple[bool, int | None], answers[0])[1]
        oldest = self._oldest(*cast(tuple[bool, int | None], answers[1]))
        if known is not None and answers[2:] == [known.digest, False] and (
                (latest or 0) <= known.version >= oldest):
            return known
        if latest is not None and latest > oldest:
            try:
                return self._probe_from(latest)
            except NotFoundError:  # the procedure's k - 1, when k is the hint itself
                with contextlib.suppress(NotFoundError):
                    return self.read_root(latest - 1, fresh=True)
            # vn/latest names a version never committed: only a hint, so it is ignored
        try:
            return self._probe_from(oldest)
        except NotFoundError:
            if oldest == 0:
                raise NoSuchCatalogError(f"no Olympia catalog at {self.storage.uri}") from None
            raise CorruptFileError(self.storage.display(OLDEST),
                                   f"names version {oldest}, whose root does not exist") from None

    def _unchanged(self, known: Root) -> bool:
        """Whether the store's root of ``known``'s version is still the file ``known``
        was read from and the next version is missing, asked together (one conditional
        read of the root, where its tag is known, and one existence probe). Then the
        spec's procedure ends at ``known``: versions from vn/oldest (never above the
        latest) to the latest are contiguous, so none is above a missing one, whatever
        the hints say."""
        tagged = self._tags.get(known.path)
        if not tagged or tagged[0] != known.digest or known.version >= MAX_VERSION:
            return False

        def ask(path: str) -> bool:
            if path != known.path:
                return self.storage.probe(path)
            try:
                return self._read_tagged(path, known) is None
            except FileNotFound:
                return False

        same, later = self.storage.map_requests(ask, [known.path, version_path(known.version + 1)])
        return same and not later

    def _probe_from(self, version: int) -> Root:
        """The root of the last version of the contiguous run that starts at ``version``
        (NoSuchVersionError when ``version`` does not exist), read from the store.

        Where the storage tells for free that the start and the next version exist (local
        disk, memory), the start is not read: the run goes past it. Refreshing after others
        committed then reads only the newest root.
        """
        skip = version < MAX_VERSION and all(
            self.storage.known_to_exist(version_path(v)) for v in (version, version + 1))
        start = None if skip else self.read_root(version, fresh=True)
        low, step = version, 1
        while low + step <= MAX_VERSION and self.storage.probe(version_path(low + step)):
            low += step
            step *= 2
        high = min(low + step, MAX_VERSION + 1)
        while high - low > 1:
            mid = (low + high) // 2
            if self.storage.probe(version_path(mid)):
                low = mid
            else:
                high = mid
        return start if start is not None and low == version else self.read_root(
            low, fresh=True)

    def codec(self, catalog_def: pb.CatalogDef) -> KeyCodec:
        return KeyCodec(NameLimits(catalog_def.namespace_name_max_size_bytes,
                                   catalog_def.table_name_max_size_bytes,
                                   catalog_def.view_name_max_size_bytes))
