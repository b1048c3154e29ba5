"""The commit protocol (spec "Commit a transaction"), shared by transactions and resumed
distributed transactions.

1. Write the new definition files and the changed non-root nodes (concurrently).
2. Create the root ``vn/<v+1>`` exclusively; then write ``vn/latest`` best-effort.
3. On losing that race the winning root exists, so it is read directly (no discovery from
   the hints) and its actions are checked against ours
   (:func:`olympia.catalog.actions.find_conflict`); without a conflict the staged changes
   are replayed onto the winner's tree and step 2 is tried again at once for ``vn/<v+2>``.
   When the winner was committed over a second before this attempt (the base was stale,
   not a race lost), the roots after it are read too, so a writer far behind catches up in
   reads, not in lost races. A rebase rewrites only
   the nodes whose content changed relative to the new base: a node already written by an
   earlier attempt with the same keys, values and children is referenced again, and
   definition files are written once.
4. Only after :attr:`CommitOptions.immediate_retries` losses in a row does a writer pause
   (jittered, growing) to break a livelock; it gives up with :class:`CommitConflict` when
   its time budget (:attr:`CommitOptions.timeout_s`, default 30 s) is spent.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import ReadSet, describe, find_conflict
from olympia.catalog.files import LATEST, CatalogFiles, Root
from olympia.catalog.keys import version_path
from olympia.catalog.reader import Snapshot
from olympia.exceptions import (
    CatalogError,
    CommitConflict,
    FileAlreadyExists,
    InvalidArgumentError,
    NoSuchVersionError,
    StorageError,
)
from olympia.tree import btree
from olympia.tree.node import Node, encode_node

DEFAULT_COMMIT_TIMEOUT_S = 30.0
STALE_MILLIS = 1000  # a winner this much older than our attempt: we were behind


def now_millis() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CommitOptions:
    """How a commit retries after losing the root race.

    Attributes:
        timeout_s: The time budget: after this many seconds of lost races the commit gives
            up with :class:`CommitConflict`.
        immediate_retries: Lost races in a row retried at once, before any pause.
        backoff_s: The first pause's upper bound; it doubles per further loss in a row,
            up to ``max_backoff_s`` (each pause is uniform in [0, bound]).
        max_backoff_s: The largest pause bound.
        clock: Monotonic seconds (injectable for tests).
        sleep: Pauses (injectable for tests).
        jitter: Draws a pause in [0, bound] (injectable for tests).
    """

    timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    immediate_retries: int = 2
    backoff_s: float = 0.005
    max_backoff_s: float = 0.05
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[float], float] = field(default=lambda bound: random.uniform(0, bound))

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise InvalidArgumentError(f"commit_timeout must be a positive number of seconds, "
                               f"got {self.timeout_s!r}")

    def pause(self, losses: int) -> float:
        """The pause bound after ``losses`` lost races in a row (0: retry at once)."""
        beyond = losses - self.immediate_retries
        if beyond <= 0:
            return 0.0
        return min(self.max_backoff_s, self.backoff_s * 2.0 ** min(beyond - 1, 20))


@dataclass(frozen=True)
class Change:
    """What one commit applies on top of whichever version it lands after.

    Attributes:
        pending: Object key -> definition file path (None: deleted).
        actions: The staged actions, checked against newer roots' actions.
        rows: The action rows the new root records (annotations included).
        new_defs: New definition files (path -> bytes), written by the first attempt.
        catalog_def: A new catalog definition (path, message), or None to keep the base's.
        tree_from: A root whose tree replaces the base's (a rollback), or None.
        rollback_from: The root path recorded as ``rollback_from_root``, or None.
        reads: A SERIALIZABLE transaction's read set, or None.
    """

    pending: Mapping[str, str | None]
    actions: Sequence[apb.ActionDef]
    rows: tuple[tuple[str, str], ...]
    new_defs: Mapping[str, bytes]
    catalog_def: tuple[str, pb.CatalogDef] | None = None
    tree_from: Root | None = None
    rollback_from: str | None = None
    reads: ReadSet | None = None


def apply_changes(base: Snapshot, root: Node, pending: Mapping[str, str | None],
                  created_at_millis: int, reuse: Mapping[btree.NodeShape, str] | None = None,
                  ) -> btree.FlushResult:
    """Replay ``pending`` onto the tree under ``root`` (nodes read through ``base``)
    copy-on-write; ``reuse`` maps the shape of nodes already written to their paths."""
    writer = btree.TreeWriter(base.nodes, root)
    for key, value in sorted(pending.items()):
        if value is None:
            writer.delete(key)
        else:
            writer.put(key, value)
    return writer.flush(created_at_millis, reuse=reuse)


def commit(files: CatalogFiles, base: Snapshot, change: Change,
           options: CommitOptions = CommitOptions()) -> Root:
    """Commit ``change`` as the version after ``base`` or, after lost races, after the
    versions that won them.

    Returns:
        The committed root.

    Raises:
        CommitConflict: A newer version conflicts with ``change``, or the time budget ran out.
        CatalogError: A node file would exceed the catalog's ``node_file_max_size_bytes``.
        StorageError: Writing a file failed (beyond the storage's own retries).
    """
    storage = files.storage
    deadline = options.clock() + options.timeout_s
    written: dict[btree.NodeShape, str] = {}  # nodes written by earlier attempts
    defs_written = False
    attempts = losses = 0
    while True:
        attempts += 1
        order = base.catalog_def.order
        created = max(now_millis(), base.created_at_millis + 1)
        tree = change.tree_from.node if change.tree_from else base.root.node
        flushed = apply_changes(base, tree, change.pending, created, written)
        cdef_path, cdef = change.catalog_def or (base.root.node.catalog_def, base.catalog_def)
        root = Node(flushed.keys, flushed.values, flushed.children, created,
                    catalog_def=cdef_path, previous_root=base.root.path,
                    rollback_from_root=change.rollback_from, actions=change.rows)
        files_out = {} if defs_written else dict(change.new_defs)
        files_out.update(btree.encode_files(flushed.files, order))
        root_bytes = encode_node(root, order)
        _check_size(cdef, {**files_out, "root": root_bytes})
        storage.write_many(files_out)
        defs_written = True
        for path, node in flushed.files.items():
            base.nodes.remember(path, node)
            written[btree.shape(node)] = path
        version = base.version + 1
        try:
            storage.create_exclusive(version_path(version), root_bytes)
        except FileAlreadyExists:
            losses += 1
            base = _checked(files, version, change)
            if base.created_at_millis + STALE_MILLIS < created:  # behind, not racing
                base = _catch_up(files, base, change)
            bound = options.pause(losses)
            if options.clock() + bound >= deadline:
                raise CommitConflict(
                    f"commit gave up after {options.timeout_s:g} s and {attempts} attempts: "
                    f"other writers kept winning (latest seen: version {base.version})",
                    version=base.version) from None
            if bound:
                options.sleep(options.jitter(bound))
            continue
        committed = Root(version, version_path(version), root, cdef)
        files.remember_root(committed)
        try:
            files.write_hint(LATEST, version)
        except StorageError:
            pass  # vn/latest is only a hint; discovery probes past it
        return committed


def _catch_up(files: CatalogFiles, base: Snapshot, change: Change) -> Snapshot:
    """The last of the roots after ``base`` that exist, each checked against ``change``."""
    while True:
        try:
            base = _checked(files, base.version + 1, change)
        except NoSuchVersionError:
            return base


def _checked(files: CatalogFiles, version: int, change: Change) -> Snapshot:
    """Read the root of ``version`` (one that won a race) and check its actions against
    ``change``.

    Returns:
        The version's snapshot, the new base.

    Raises:
        NoSuchVersionError: ``version`` does not exist.

    Raises:
        CommitConflict: The winner's actions conflict with ``change``.
    """
    winner = Snapshot(files, files.read_root(version))
    found = find_conflict(list(change.actions), winner.actions(), change.reads)
    if found is not None:
        ours, theirs, obj = found
        mine = f"{describe(ours)} " if ours is not None else "what it read: "
        raise CommitConflict(
            f"commit conflict on {obj}: this transaction's {mine}conflicts with "
            f"{describe(theirs)} committed in version {version}",
            object_name=obj, version=version)
    return winner


def _check_size(cdef: pb.CatalogDef, files: Mapping[str, bytes]) -> None:
    limit = cdef.node_file_max_size_bytes
    if not limit:
        return
    for path, data in files.items():
        if (path == "root" or path.startswith("node/")) and len(data) > limit:
            raise CatalogError(
                f"node file {path} would be {len(data)} bytes, above the catalog's "
                f"node_file_max_size_bytes={limit}")
