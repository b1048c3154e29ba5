"""The commit protocol (docs/FORMAT.md §8), shared by transactions and resumed distributed
transactions. :func:`commit` runs it in the caller's thread; read top to bottom, it is the
protocol:

1. A transaction stages a :class:`Change` (nothing is written while staging).
2. :func:`commit` hands it to :func:`land`, which makes the attempts.
3. :func:`_attempt` replays the change copy-on-write onto the base's tree and encodes the
   changed nodes and the root, writing nothing; where telling is free (local disk,
   memory) it then asks once whether ``vn/<v+1>`` is taken (:func:`_lost_already`), so
   that a lost attempt writes nothing; then :meth:`olympia.storage.Storage.publish`
   writes the new definition and node files and, in the same batch of the first
   attempt, reads the base's root again (a prefix restored from a copy may hold another
   root under that name, or none: the change then gets :class:`CommitConflict`,
   :func:`base_moved`, and no root is created); then it creates ``vn/<v+1>``
   exclusively (put-if-absent). The winner writes the ``vn/latest`` hint, best effort
   (:func:`_write_hint`).
4. On losing the race, :func:`land` pauses (jittered exponential backoff:
   :meth:`CommitOptions.pause`); then :func:`_catch_up` reads the roots from the base on
   *from the store* (through the one that won, and on until one is missing:
   :func:`roots_from`), checks that the base is still there as it was read and that no
   version after it conflicts with the change (:func:`rebase_error`) nor fails its
   condition (:attr:`Change.check`, called per version), and step 3 runs
   again at once on the newest, until the time budget (``commit_timeout``) is spent.
   Node files an earlier attempt wrote are reused where their content is unchanged, and
   definition files are written once (:class:`_Written`), but only once seen in the store
   again: their existence is checked in the batch that writes the attempt's new files,
   before the root is created (:meth:`Storage.publish`'s ``present``); one found missing
   (a restore from a copy removed it) sends the attempt back to step 4 with nothing
   reused (:class:`_Vanished`).

Every fact a commit builds on was read from the store in this commit, or is immutable
content verified by its checksum (definition and node files); nothing is kept outside the
catalog prefix. Nothing reported failed lands later: the caller's thread is the only one
that lands its change, so an interrupt (a task timeout) raised before the root's create
began, or once the race was lost, leaves nothing landed and is raised as it is; one raised
once the create may have happened is :class:`CommitOutcomeUnknown`.

With :attr:`CommitOptions.coalesce`, :func:`commit` hands the change to the in-process
queue of :mod:`olympia.catalog.coalesce` instead, which lands the disjoint changes of
threads sharing one catalog object together, through the same :func:`land`.

Over 400 lines on purpose: the protocol is told in this one module in the order it runs
(the steps above name its functions, top to bottom), so it can be checked against
docs/FORMAT.md §8 without leaving the file; the rest is what it lands (:class:`Change`) and
how (:class:`CommitOptions`).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import ReadSet, describe, find_conflict
from olympia.catalog.files import LATEST, CatalogFiles, Root, root_digest
from olympia.catalog.keys import version_path
from olympia.catalog.reader import Snapshot
from olympia.exceptions import (
    CatalogError,
    CommitConflict,
    CommitOutcomeUnknown,
    FileAlreadyExists,
    FileChanged,
    FileNotFound,
    InvalidArgumentError,
    NoSuchVersionError,
    OlympiaError,
    StorageError,
)
from olympia.tree import btree
from olympia.tree.node import Node, encode_node

DEFAULT_COMMIT_TIMEOUT_S = 30.0
READ_AHEAD = 2  # roots read at once past those known to exist, until one is missing

_log = logging.getLogger(__name__)


def now_millis() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CommitOptions:
    """How a commit retries after losing the root race.

    Attributes:
        timeout_s: The time budget: after this many seconds of lost races the commit gives
            up with :class:`CommitConflict`.
        backoff_s: The pause bound after the first lost race in a row; it doubles per
            further loss, up to ``max_backoff_s`` (each pause is uniform in [0, bound]).
        max_backoff_s: The largest pause bound.
        clock: Monotonic seconds (injectable for tests).
        sleep: Pauses (injectable for tests).
        jitter: Draws a pause in [0, bound] (injectable for tests).
        coalesce: Commits issued concurrently by threads through one catalog object go
            through its queue and may land together in one version
            (:mod:`olympia.catalog.coalesce`); without it each runs the protocol in its
            caller's thread, racing the others as separate writers do.
        write_hint: Runs the best-effort write of the ``vn/latest`` hint once a version
            landed (by default at once, in the committing thread; ``olympia serve``
            hands it to a worker thread, so that its answer does not wait for it).
    """

    timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    backoff_s: float = 0.001
    max_backoff_s: float = 0.25
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[float], float] = field(default=lambda bound: random.uniform(0, bound))
    coalesce: bool = False
    write_hint: Callable[[Callable[[], None]], object] = field(default=lambda write: write())

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise InvalidArgumentError(f"commit_timeout must be a positive number of seconds, "
                                       f"got {self.timeout_s!r}")

    def pause(self, losses: int) -> float:
        """The pause bound after ``losses`` (at least 1) lost races in a row."""
        return float(min(self.max_backoff_s, self.backoff_s * 2.0 ** min(losses - 1, 30)))


Check = Callable[[Snapshot, Snapshot], None]
"""A condition of a change beyond its actions' conflicts: called on a rebase with each
version landed since the change was staged (``after``) and the version before it
(``before``), in order, before the next attempt writes anything (a distributed
transaction's statement: once, with the running view it was staged on and the newer one);
it raises the caller's error (an :class:`OlympiaError`) when the change may not land after
``after``, as if it had been staged there."""


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
        check: A condition each version landed after the one the change was staged on
            must meet for the change to land after it (:data:`Check`), or None.
        external_writes: Writes of files outside the catalog that the change's
            definitions name (a table's metadata file), run in the batch that writes the
            new files, before the root is created (``alongside`` of
            :meth:`~olympia.storage.Storage.publish`, whose rules they follow); an
            attempt after a lost race runs only those that no attempt's batch ran.
    """

    pending: Mapping[str, str | None]
    actions: Sequence[apb.ActionDef]
    rows: tuple[tuple[str, str], ...]
    new_defs: Mapping[str, bytes]
    catalog_def: tuple[str, pb.CatalogDef] | None = None
    tree_from: Root | None = None
    rollback_from: str | None = None
    reads: ReadSet | None = None
    check: Check | None = None
    external_writes: tuple[Callable[[], object], ...] = ()

    @property
    def coalescible(self) -> bool:
        """Whether the change may share a version with others: object changes only (no
        catalog definition, no rollback, no check) under SNAPSHOT isolation."""
        return (self.catalog_def is None and self.tree_from is None and self.reads is None
                and self.check is None)


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
    versions that won them (with :attr:`CommitOptions.coalesce`, through the catalog
    object's queue: :func:`olympia.catalog.coalesce.commit`; a change with a check never
    goes through it: it races the queue's batches as another writer would).

    Returns:
        The committed root.

    Raises:
        CommitConflict: The store no longer holds ``base`` as it was read, a newer version
            conflicts with ``change``, or the time budget ran out.
        OlympiaError: A newer version fails ``change``'s check (:attr:`Change.check`):
            what the check raised; nothing of the change landed.
        CatalogError: A node file would exceed the catalog's ``node_file_max_size_bytes``.
        TransientStorageError: The root's create kept failing and whether it landed could
            not be learned from the store (the outcome is unknown: refresh and look).
        CommitOutcomeUnknown: An exception (a task timeout, say: its ``__cause__``)
            interrupted the commit once its root's create may have happened (coalesced:
            also once its change was in a batch being landed); it landed, or it never
            will. Without the queue, one raised before that or once the race was lost
            (in the pause) is raised as it is: nothing landed; coalesced, so is one
            reaching a caller whose change is still queued, which withdraws it. One that
            is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``) is raised as
            it is, whatever the change's fate.
        StorageError: Writing a file failed (beyond the storage's own retries).
    """
    if options.coalesce and change.check is None:  # the opt-in queue, loaded where used
        from olympia.catalog import coalesce

        return coalesce.commit(files, base, change, options)
    return land(files, base, change, options,
                lambda last, through: (_catch_up(files, last, change, through), change),
                base_read=False)


CatchUp = Callable[[Snapshot, int], tuple[Snapshot, Change]]
"""After a lost race: given the base and the version known to exist after it (the one that
won), what to build next: the newest version read from the store and the change to replay
onto it."""


def land(files: CatalogFiles, base: Snapshot, change: Change, options: CommitOptions,
         catch_up: CatchUp, base_read: bool) -> Root:
    """Commit ``change`` as the version after ``base``, making attempts (:func:`_attempt`)
    until one wins the race or the time budget is spent; after each lost race, pause, then
    build on what ``catch_up`` read. Every attempt builds on a root read from the store in
    this commit: ``base``'s when ``base_read`` (the caller has just read it), else read
    again by the first attempt; the others' by ``catch_up``.

    Returns:
        The committed root.

    Raises:
        CommitConflict: The time budget ran out (or ``catch_up`` raised it).
        CatalogError, TransientStorageError, CommitOutcomeUnknown, StorageError: As
            :func:`commit`.
    """
    deadline = options.clock() + options.timeout_s
    written = _Written()
    attempts = losses = 0
    while True:
        attempts += 1
        try:
            return _attempt(files, base, change, written,
                            attempts == 1 and not base_read, options.write_hint)
        except FileAlreadyExists:
            losses += 1
        except _Vanished:  # the store went back (a restore): build anew on what it holds
            written = _Written()
            losses += 1
        bound = options.pause(losses)
        if options.clock() + bound >= deadline:
            raise CommitConflict(
                f"commit gave up after {options.timeout_s:g} s and {attempts} attempts: "
                f"other writers kept winning (latest seen: version {base.version + 1})",
                version=base.version + 1)
        # pause, then learn the winners (and that the base is still stored): the next
        # attempt builds on what was just read
        options.sleep(options.jitter(bound))
        base, change = catch_up(base, base.version + 1)


def _attempt(files: CatalogFiles, base: Snapshot, change: Change, written: _Written,
             confirm: bool, write_hint: Callable[[Callable[[], None]], object]) -> Root:
    """Write ``change`` as the version after ``base`` and return its root; with ``confirm``,
    only if the store's root of ``base``'s version is still the one read (checked in the
    batch that writes the new files). Once it landed, ``write_hint`` runs the write of
    vn/latest.

    Raises:
        FileAlreadyExists: Another writer took the version (seen before writing, where
            telling is free, or when creating the root).
        CommitConflict: With ``confirm``: the store's root of the base's version is not
            the one read.
        _Vanished: A file an earlier attempt wrote, which this one would name, is gone.
        CommitOutcomeUnknown: An exception interrupted it once the root's create may have
            happened.
    """
    version = base.version + 1
    order = base.catalog_def.order
    created = max(now_millis(), base.created_at_millis + 1)
    tree = change.tree_from.node if change.tree_from else base.root.node
    flushed = apply_changes(base, tree, change.pending, created, written.nodes)
    cdef_path, cdef = change.catalog_def or (base.root.node.catalog_def, base.catalog_def)
    root = Node(flushed.keys, flushed.values, flushed.children, created,
                catalog_def=cdef_path, previous_root=base.root.path,
                rollback_from_root=change.rollback_from, actions=change.rows)
    files_out = {p: d for p, d in change.new_defs.items() if p not in written.defs}
    files_out.update(btree.encode_files(flushed.files, order))
    reused = sorted(flushed.reused | (change.new_defs.keys() & written.defs))
    root_bytes = encode_node(root, order)
    _check_size(cdef, {**files_out, "root": root_bytes})
    _lost_already(files, version)
    try:  # what an earlier attempt wrote is named only if the store still holds it
        files.storage.publish(files_out, version_path(version), root_bytes, present=reused,
                              unchanged={version_path(base.version): base.root.digest}
                              if confirm else None,
                              alongside=[w for w in change.external_writes
                                         if w not in written.external])
        committed = Root(version, version_path(version), root, cdef, root_digest(root_bytes))
        for path, node in flushed.files.items():  # the next transaction reads them
            base.nodes.remember(path, node)
        # for readers (a commit reads roots fresh), with the file's tag where it is free
        files.remember_root(committed, files.storage.tag(committed.path))
        write_hint(partial(_write_hint, files, version))
        return committed
    except FileAlreadyExists:
        written.note(base, change, flushed)  # in place: a rebase may refer to them
        raise
    except FileChanged as exc:  # the store's root of the base is not the one read
        raise moved_conflict(base, exc.digest) from None
    except FileNotFound as exc:
        raise _Vanished(str(exc)) from None
    except OlympiaError:
        raise
    except Exception as exc:  # an interrupt (a task timeout) once the create may have run
        raise CommitOutcomeUnknown(
            f"the commit was interrupted ({exc!r}) once the create of its root, version "
            f"{version}, may have happened: whether it landed is unknown; refresh and "
            "look") from exc


def _lost_already(files: CatalogFiles, version: int) -> None:
    """Raise FileAlreadyExists when the storage can tell without a request (local disk,
    memory) that ``version`` is taken: asked once per attempt, when everything is built
    and nothing written, so a lost attempt writes nothing."""
    path = version_path(version)
    if files.storage.known_to_exist(path):
        raise FileAlreadyExists("file already exists", files.storage.display(path))


class _Vanished(Exception):
    """A file an earlier attempt of this commit wrote is no longer in the store (a prefix
    restored from a copy): nothing was created, and nothing that attempt wrote is reused."""


def _catch_up(files: CatalogFiles, base: Snapshot, change: Change, through: int,
              ) -> Snapshot:
    """Read the roots from ``base`` on from the store (through ``through``, known to
    exist, and further where that is free: :func:`roots_from`) and check ``change``
    against the versions after ``base``: their actions, then its :attr:`Change.check`.

    Returns:
        The newest version read.

    Raises:
        CommitConflict: The store no longer holds ``base`` as it was read, or a version
            after it conflicts with ``change``.
        OlympiaError: What the change's check raised.
    """
    roots = roots_from(files, base.version, through)
    error = rebase_error(files, base, change, roots, {})
    if error is not None:
        raise error
    newest = Snapshot(files, roots[-1])
    if change.check is not None:  # (roots[0] is base's: rebase_error checked it)
        versions = [base, *(Snapshot(files, root) for root in roots[1:-1]), newest]
        for before, after in itertools.pairwise(versions[:len(roots)]):
            change.check(before, after)
    return newest


def rebase_error(files: CatalogFiles, base: Snapshot, change: Change, roots: Sequence[Root],
                 theirs: dict[int, list[apb.ActionDef]]) -> CommitConflict | None:
    """Why ``change``, staged on ``base``, cannot land after the newest of ``roots`` (read
    now from the store: consecutive versions from one not after ``base``'s, or none), if
    it cannot: the store no longer holds ``base`` as it was read, or a version after it
    conflicts. ``theirs`` keeps each version's actions once read (version -> actions)."""
    at = base.version - roots[0].version if roots else 0
    error = base_moved(base, roots[at].digest if roots else None)
    for root in roots[at + 1:]:
        if error is not None:
            break
        if root.version not in theirs:
            theirs[root.version] = Snapshot(files, root).actions()
        error = conflict_in(root.version, theirs[root.version], change)
    return error


def base_moved(base: Snapshot, digest: str | None) -> CommitConflict | None:
    """The conflict of a change staged on ``base`` when the store's root of that version,
    read now, has another digest, or is missing (``digest`` None): a prefix restored from
    an earlier copy (and perhaps committed to again) no longer holds the version it was
    staged on, and building on it would lose the store's versions or leave a gap before
    ours."""
    return None if digest == base.root.digest else moved_conflict(base, digest)


def moved_conflict(base: Snapshot, digest: str | None) -> CommitConflict:
    """:func:`base_moved`'s conflict, for a root read with ``digest`` (None: missing)."""
    now = "is missing" if digest is None else "holds another root"
    return CommitConflict(
        f"version {base.version}, which this commit began on, is no longer in the store as "
        f"it was read: the store {now} (expired, or restored from a copy?); begin again on "
        "the latest version", version=base.version)


def roots_from(files: CatalogFiles, version: int, through: int) -> list[Root]:
    """The roots of ``version`` and the versions after it read from the store, never from
    a cache (a restored prefix may hold other roots under the same names), until one is
    missing: those through ``through`` (known to exist: a create of it failed, or this
    process landed it) and :data:`READ_AHEAD` more at a time, concurrently on remote
    storage (where telling is free, local disk and memory, a missing one is not read)."""
    def read(v: int) -> Root | None:
        if not (files.storage.remote or files.storage.known_to_exist(version_path(v))):
            return None
        try:
            return files.read_root(v, fresh=True)
        except NoSuchVersionError:
            return None

    roots: list[Root] = []
    first, last = version, max(through, version + READ_AHEAD)
    while True:
        for root in files.storage.map_requests(read, range(first, last + 1)):
            if root is None:
                return roots
            roots.append(root)
        first, last = last + 1, last + READ_AHEAD


def conflict_in(version: int, theirs: list[apb.ActionDef],
                change: Change) -> CommitConflict | None:
    """The conflict between ``change`` and the actions ``theirs`` of ``version``, if any."""
    found = find_conflict(list(change.actions), theirs, change.reads)
    if found is None:
        return None
    ours, their, obj = found
    mine = f"{describe(ours)} " if ours is not None else "what it read: "
    return CommitConflict(
        f"commit conflict on {obj}: this transaction's {mine}conflicts with "
        f"{describe(their)} committed in version {version}",
        object_name=obj, version=version)


@dataclass
class _Written:
    """What earlier attempts of one commit wrote, for a rebase to reuse: nodes by shape
    (their content) -> path, the definition files, and the external writes that ran."""

    nodes: dict[btree.NodeShape, str] = field(default_factory=dict)
    defs: set[str] = field(default_factory=set)
    external: set[Callable[[], object]] = field(default_factory=set)

    def note(self, base: Snapshot, change: Change, flushed: btree.FlushResult) -> None:
        """An attempt's files are in place (its root lost the race)."""
        self.defs.update(change.new_defs)
        self.external.update(change.external_writes)
        for path, node in flushed.files.items():
            base.nodes.remember(path, node)
            self.nodes[btree.shape(node)] = path


def _write_hint(files: CatalogFiles, version: int) -> None:
    """The best-effort write of vn/latest once ``version`` landed: one that fails is
    logged as a warning, never raised (the version landed; discovery probes past an older
    hint, one root per version it is behind)."""
    try:
        files.write_hint(LATEST, version)
    except StorageError as exc:
        _log.warning("version %d landed, but its vn/latest hint was not written (%s): "
                     "discovery probes past the older hint", version, exc)


def _check_size(cdef: pb.CatalogDef, files: Mapping[str, bytes]) -> None:
    limit = cdef.node_file_max_size_bytes
    if not limit:
        return
    for path, data in files.items():
        if (path == "root" or path.startswith("node/")) and len(data) > limit:
            raise CatalogError(
                f"node file {path} would be {len(data)} bytes, above the catalog's "
                f"node_file_max_size_bytes={limit}")
