"""What an expiry run keeps and what it may delete: the rules both engines share.

Nothing here knows about Spark. The functions that touch storage (:func:`expand_roots`,
:func:`expand_nodes`, :func:`read_transactions`, :func:`delete_paths`) take a
:class:`~olympia.storage.Storage` and a batch of paths, so Spark executors call them on their
partitions and the single-process engine calls them on everything; the decisions
(:func:`is_candidate`, :func:`is_live`; :func:`~olympia.versions.policy.decide` and
:func:`~olympia.versions.policy.export_roots` with the policy) are pure.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from olympia._proto import objects_pb2 as pb
from olympia.catalog.files import CatalogFiles
from olympia.catalog.keys import path_version
from olympia.catalog.transaction import now_millis
from olympia.exceptions import (
    FileNotFound,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.storage import Storage
from olympia.tree.node import decode_node
from olympia.versions.policy import Decision

FOLDERS = ("vn", "node", "def", "dtxn")
DEF_KINDS = ("catalog", "namespace", "table", "view")
HEX = "0123456789abcdef"

# Only files named exactly as the format names them are ever deleted; anything else under
# the prefix (hints, another tool's files, a catalog nested under this one) is left alone.
# Glob and control characters are excluded: no delete can be expanded into a pattern.
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_SAFE = r"[^/*?\[\]\x00-\x1f\x7f]"
ROOT_RE = re.compile(r"vn/[01]{32}")
NODE_RE = re.compile(rf"node/{_UUID}\.arrow")
DEF_RE = re.compile(rf"def/(?:{'|'.join(DEF_KINDS)})/{_UUID}{_SAFE}*\.binpb")
DTXN_RE = re.compile(rf"dtxn/{_SAFE}+\.binpb")

# edge kinds produced by the walk
FILE = "file"        # a reachable file that has no children (definition, root itself)
NODE = "node"        # a child node still to be read
CDEF = "cdef"        # a root's catalog definition (reachable; the driver reads it for exports)
MISSING = "missing"  # a root that does not exist

READ_BATCH = 256
DELETE_BATCH = 1000
DELETE_ATTEMPTS = 6
ERROR_SAMPLE = 10


def listing_prefixes(split: int = 1) -> list[str]:
    """Key prefixes that split a catalog's files into similar-sized listings: ``vn/``,
    ``dtxn/``, then ``node/`` and each ``def/<kind>/`` by the first ``split`` hex digits of
    their uuid4 names. Files outside these prefixes are never listed, so never deleted."""
    heads = [""]
    for _ in range(split):
        heads = [h + c for h in heads for c in HEX]
    prefixes = ["vn/", "dtxn/"] + [f"node/{h}" for h in heads]
    prefixes += [f"def/{kind}/{h}" for kind in DEF_KINDS for h in heads]
    return prefixes


def folder_of(path: str) -> str:
    return path.split("/", 1)[0]


def kind_of(path: str) -> str | None:
    """``root``, ``node``, ``def`` or ``dtxn`` for a file the format names; else None."""
    if ROOT_RE.fullmatch(path):
        return "root"
    if NODE_RE.fullmatch(path):
        return "node"
    if DEF_RE.fullmatch(path):
        return "def"
    if DTXN_RE.fullmatch(path):
        return "dtxn"
    return None


Clock = Callable[[], int]  # epoch milliseconds


def effective_now(now_ms: int | None = None, clock: Clock = now_millis) -> int:
    """The instant a run evaluates its policy at: ``now_ms`` if given, never later than
    ``clock()`` (a time in the future would make files of commits in flight look old).
    Every time comparison of a run derives from this one instant."""
    current = clock()
    return current if now_ms is None else min(int(now_ms), current)


def is_candidate(path: str, modified_s: float, new_oldest: int, cutoff_ms: int) -> bool:
    """Whether a listed file that nothing kept reaches may be deleted.

    A root goes when its version is below the new oldest version (roots at or above it are
    never unreachable: they are all walked, and newer ones were not listed). Node, definition
    and transaction files go only when last modified before the grace cutoff — files of a
    commit or export still in flight are young. Anything the format does not name is kept.
    """
    kind = kind_of(path)
    if kind == "root":
        version = path_version(path)
        return version is not None and version < new_oldest
    if kind is None:
        return False
    return modified_s * 1000 < cutoff_ms


# --- reading the trees -------------------------------------------------------------------


def _read_or_none(storage: Storage, path: str) -> bytes | None:
    try:
        return storage.read(path)
    except FileNotFound:
        return None


def expand_roots(storage: Storage, order: int, paths: Iterable[str],
                 ) -> Iterator[tuple[str, str]]:
    """Read root nodes (``vn/`` roots, or running roots of distributed transactions under
    ``node/``) and yield ``(kind, path)`` edges: the root itself and its definitions as
    FILE, its catalog definition as CDEF, its children as NODE, or MISSING if it does not
    exist. A root that exists but cannot be read raises (fail closed)."""
    batch = list(paths)
    for i in range(0, len(batch), READ_BATCH):
        chunk = batch[i:i + READ_BATCH]
        for path, data in zip(chunk, storage.map(lambda p: _read_or_none(storage, p), chunk),
                              strict=True):
            if data is None:
                yield MISSING, path
                continue
            node = decode_node(data, storage.display(path), order, root=True)
            yield FILE, path
            if node.catalog_def:
                yield CDEF, node.catalog_def
            for value in node.values:
                yield FILE, value
            for child in node.children or ():
                yield NODE, child


def expand_nodes(storage: Storage, order: int, paths: Iterable[str],
                 ) -> Iterator[tuple[str, str]]:
    """Read non-root nodes and yield their definitions (FILE) and children (NODE). Any node
    that is missing or unreadable raises: a walk with a hole in it must never lead to a
    delete."""
    batch = list(paths)
    for i in range(0, len(batch), READ_BATCH):
        chunk = batch[i:i + READ_BATCH]
        for path, data in zip(chunk, storage.read_many(chunk), strict=True):
            node = decode_node(data, storage.display(path), order)
            for value in node.values:
                yield FILE, value
            for child in node.children or ():
                yield NODE, child


@dataclass(frozen=True)
class TxnRoots:
    """A saved distributed transaction: its file and the roots it needs."""

    path: str
    id: str
    beginning_root: str
    running_root: str
    expire_at_ms: int


def read_transactions(storage: Storage, paths: Iterable[str]) -> Iterator[TxnRoots]:
    """Parse ``dtxn/*.binpb`` records. One that vanished meanwhile (committed or aborted) is
    skipped; one that cannot be parsed raises — what it protects would be unknown."""
    files = CatalogFiles(storage)
    for path in paths:
        if kind_of(path) != "dtxn":
            continue
        try:
            record = files.read_def(path, pb.DistributedTransactionDef)
        except FileNotFound:
            continue
        yield TxnRoots(path, record.id, record.beginning_root_node_file_path,
                       record.running_root_node_file_path, record.expire_at_millis)


def is_live(txn: TxnRoots, decision: Decision) -> bool:
    """A transaction is live until its expiry time plus the grace period (which absorbs
    clock skew between this job and the process that would commit it)."""
    return txn.expire_at_ms > decision.cutoff_ms


# --- deleting ------------------------------------------------------------------------------


@dataclass
class DeleteReport:
    """Outcome of deleting a batch of paths, per folder."""

    attempted: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: DeleteReport) -> None:
        for mine, theirs in ((self.attempted, other.attempted), (self.failed, other.failed)):
            for folder, n in theirs.items():
                mine[folder] = mine.get(folder, 0) + n
        self.errors.extend(other.errors[:max(0, ERROR_SAMPLE - len(self.errors))])


def _with_backoff(fn: Callable[[], None], attempts: int = DELETE_ATTEMPTS) -> None:
    """Call ``fn`` retrying throttling and other transient failures with exponential
    backoff (Storage already retries briefly; a throttled bucket needs longer)."""
    for attempt in range(attempts):
        try:
            fn()
            return
        except TransientStorageError:
            if attempt + 1 == attempts:
                raise
            time.sleep(min(30.0, 0.5 * 2 ** attempt))


def delete_paths(storage: Storage, paths: list[str]) -> DeleteReport:
    """Delete ``paths`` (already checked against :func:`kind_of`) in batches of up to 1000
    with the storage's bounded concurrency; a missing file counts as deleted. Files a bulk
    request left with a transient error (throttling) are sent again with backoff; a request
    that fails as a whole is retried file by file, so one bad file does not hide the others'
    outcome."""
    for path in paths:
        if kind_of(path) is None:  # the last line of defence against deleting a stranger
            raise ValueError(f"refusing to delete {path!r}: not a file the format names")
    chunks = [paths[i:i + DELETE_BATCH] for i in range(0, len(paths), DELETE_BATCH)]

    def run(chunk: list[str]) -> DeleteReport:
        report = DeleteReport()
        for path in chunk:
            folder = folder_of(path)
            report.attempted[folder] = report.attempted.get(folder, 0) + 1
        left: dict[str, StorageError] = {}  # files not deleted, each with its last error
        pending = chunk

        def attempt() -> None:
            nonlocal pending
            try:
                storage.delete_many(pending, batch=len(pending))
                failed: dict[str, StorageError] = {}
            except PartialDeleteError as exc:
                failed = exc.errors
            for path in pending:
                left.pop(path, None)
            left.update(failed)
            pending = [p for p, e in failed.items() if isinstance(e, TransientStorageError)]
            if pending:
                raise TransientStorageError(f"{len(pending)} files not deleted yet")

        try:
            _with_backoff(attempt)
        except TransientStorageError as exc:  # still failing after the last attempt
            for path in pending:
                left.setdefault(path, exc)
        except StorageError:  # a request failed as a whole
            for path in pending:
                left.pop(path, None)
                try:
                    _with_backoff(functools.partial(storage.delete, path))
                except FileNotFound:
                    pass  # gone already: that is what we wanted
                except StorageError as exc:
                    left[path] = exc
        for path, error in sorted(left.items()):
            folder = folder_of(path)
            report.failed[folder] = report.failed.get(folder, 0) + 1
            if len(report.errors) < ERROR_SAMPLE:
                report.errors.append(str(error))
        return report

    total = DeleteReport()
    for report in storage.map(run, chunks):
        total.merge(report)
    return total
