"""The commit protocol (docs/FORMAT.md §8), shared by transactions and resumed distributed
transactions. Read top to bottom, it is the protocol:

1. A transaction stages a :class:`Change` (nothing is written while staging).
2. :func:`commit` queues it in the catalog object's :class:`CommitGroup`: commits that
   threads of one process make through one catalog object are landed one batch at a time,
   first come first landed, by whichever caller finds no batch under way (the leader).
3. :func:`_land_batch` reads each member's base root from the store again and keeps
   only members whose base is still there with the same digest (:func:`_verified`: a
   prefix restored from a copy may hold other roots under the same names). The batch's
   base is the newest of the members' bases. When a member began on an older version, or
   this group already landed a newer one, the bases and the versions after them are read
   in one batch (:func:`_catch_up`).
4. :func:`_attempt` replays the change copy-on-write onto the base's tree, encodes the
   changed nodes and the root, and :meth:`olympia.storage.Storage.publish` writes the new
   definition and node files, then creates ``vn/<v+1>`` exclusively (put-if-absent).
   Where telling is free (local disk, memory), an attempt looks whether ``vn/<v+1>`` is
   taken before each costly step (:func:`_lost_already`), and a lost one stops there.
5. On losing the race, the leader pauses (jittered exponential backoff:
   :meth:`CommitOptions.pause`), then :func:`_catch_up` reads the roots after
   the base *from the store* (through the one that won, and on until one is missing),
   checks each member's actions against theirs
   (:func:`olympia.catalog.actions.find_conflict`) and rebases on the newest, and step 4
   runs again at once, on what was just read; until the time budget (``commit_timeout``)
   is spent. The roots read include the base itself: a retry builds only on a base it
   read in this attempt. Node files an earlier attempt wrote are reused where their
   content is unchanged, and definition files are written once (:class:`_Written`), but
   only once seen in the store again: their existence is checked in the batch that writes
   the attempt's new files, before the root is created (:meth:`Storage.publish`'s
   ``present``); one found missing (a restore from a copy removed it) sends the attempt
   back to step 5 with nothing reused.
6. The winner writes the ``vn/latest`` hint, best effort (:func:`_write_hint`).

With :attr:`CommitOptions.coalesce`, disjoint changes of one batch share one version and
each caller gets its own outcome (a conflict is reported to the caller it concerns).
Every fact a commit builds on was read from the store in this commit, or is immutable
content verified by its checksum (definition and node files); nothing is kept outside
the catalog prefix, and a change only ever lands from the process that made it. Nothing
reported failed lands later: a caller interrupted while its change is queued withdraws
it; one interrupted once its change is in the batch being landed is told
:class:`CommitOutcomeUnknown`.

Over 400 lines for one reason: the queue of in-process commits (:class:`CommitGroup`) sets
each member's outcome from the attempt loop, so both live beside the protocol, in the
order of the steps above.
"""

from __future__ import annotations

import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

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
        coalesce: Commits issued concurrently by threads through one catalog object may
            land together in one version (see :class:`CommitGroup`); without it they take
            turns, a version each.
    """

    timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    backoff_s: float = 0.001
    max_backoff_s: float = 0.25
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[float], float] = field(default=lambda bound: random.uniform(0, bound))
    coalesce: bool = False

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise InvalidArgumentError(f"commit_timeout must be a positive number of seconds, "
                                       f"got {self.timeout_s!r}")

    def pause(self, losses: int) -> float:
        """The pause bound after ``losses`` (at least 1) lost races in a row."""
        return float(min(self.max_backoff_s, self.backoff_s * 2.0 ** min(losses - 1, 30)))


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

    @property
    def coalescible(self) -> bool:
        """Whether the change may share a version with others: object changes only (no
        catalog definition, no rollback) under SNAPSHOT isolation."""
        return self.catalog_def is None and self.tree_from is None and self.reads is None


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
    versions that won them. Commits that threads issue concurrently through the same
    ``files`` take turns; with :attr:`CommitOptions.coalesce` they may land together in one
    version.

    Returns:
        The committed root.

    Raises:
        CommitConflict: A newer version conflicts with ``change``, or the time budget ran out.
        CatalogError: A node file would exceed the catalog's ``node_file_max_size_bytes``.
        TransientStorageError: The root's create kept failing and whether it landed could
            not be learned from the store (the outcome is unknown: refresh and look).
        CommitOutcomeUnknown: An exception (a task timeout, say: its ``__cause__``)
            interrupted the caller, or the thread landing the change, once the change was
            in the batch being landed; it lands in that batch or never. An interrupt that
            reaches the caller while the change is still queued withdraws it and is raised
            as it is (the change never lands); so is one that is not an ``Exception``
            (``KeyboardInterrupt``, ``SystemExit``), whatever the change's fate.
        StorageError: Writing a file failed (beyond the storage's own retries).
    """
    member = _Member(base, change, options)
    commit_group(files).submit(files, member)
    return member.outcome()


@dataclass(eq=False)
class _Member:
    """One caller's change (a queued commit), its base (advanced as it is checked against
    newer versions), how to commit it and, once known, its outcome."""

    base: Snapshot
    change: Change
    options: CommitOptions
    root: Root | None = None
    error: BaseException | None = None
    gone: bool = False  # its caller was interrupted and left while its batch lands

    @property
    def joins(self) -> bool:
        """Whether the change may share a version with others'."""
        return self.options.coalesce and self.change.coalescible

    @property
    def finished(self) -> bool:
        return self.root is not None or self.error is not None

    def outcome(self) -> Root:
        if self.error is not None:
            raise self.error
        assert self.root is not None
        return self.root


class CommitGroup:
    """The queued commits of one :class:`CatalogFiles` (one catalog object) in this
    process, landed in turns: first come, first landed.

    A caller that finds no batch under way leads: it takes the oldest queued commit (with
    :attr:`CommitOptions.coalesce`, also every later one that conflicts with none taken:
    :func:`_disjoint`), lands them as one version (:func:`_land_batch`) and sets each
    member's outcome; callers arriving meanwhile wait. A commit left out waits for the
    next batch, where it is checked against the version just landed as against any other.
    The group keeps only the number of the newest version the last batch landed or read:
    where to look in the store, never what the store holds.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: list[_Member] = []  # queued, in order (left out of a batch first)
        self._landing: list[_Member] = []  # the members of the batch under way
        self._leading = False
        self._newest = -1  # the newest version the last batch landed or read

    @property
    def submitted(self) -> int:
        """Changes whose callers this group still holds: queued, or in the batch under way
        (their outcome set or not: each caller waits until that batch ends, unless it is
        interrupted)."""
        with self._cond:
            return len(self._waiting) + sum(not m.gone for m in self._landing)

    @property
    def landing(self) -> bool:
        """Whether a batch is under way."""
        with self._cond:
            return self._leading

    def submit(self, files: CatalogFiles, member: _Member) -> None:
        """Commit ``member`` (alone or with others); its outcome is set on return.

        Raises:
            BaseException: An interrupt (see :func:`commit`).
        """
        queued = leading = False
        while True:
            try:
                with self._cond:
                    if not queued:
                        self._waiting.append(member)
                        queued = True
                    # a caller returns once its outcome is set and the batch that set it
                    # ended
                    while self._leading and (member in self._landing or not member.finished):
                        self._cond.wait()
                    if member.finished:
                        return
                    self._leading = leading = True
                    self._landing, self._waiting = _disjoint(self._waiting)
                self._newest = _land_batch(files, self._landing, self._newest)
            except BaseException as exc:
                if leading:
                    self._batch_failed(member, list(self._landing), exc)
                else:
                    with self._cond:
                        self._interrupted(member, exc)
                    return
            finally:
                if leading:
                    with self._cond:
                        self._landing = []
                        self._leading = leading = False
                        self._cond.notify_all()

    def _interrupted(self, member: _Member, exc: BaseException) -> None:
        """``member``'s caller was interrupted by ``exc`` (this group's lock held). Not in
        the batch under way: the change is withdrawn from the queue, so it never lands,
        and ``exc`` is raised. In it: its outcome, if set, is the caller's; otherwise
        :class:`CommitOutcomeUnknown` is raised (``exc`` itself if not an Exception)."""
        if member.finished or member in self._landing:
            member.gone = True
            if not isinstance(exc, Exception):
                raise exc
            if member.finished:
                return  # the batch decided before the interrupt was seen
            member.error = CommitOutcomeUnknown(
                f"this commit was interrupted ({exc!r}) after its change was handed to the "
                "batch being landed: whether it lands is unknown (in that batch or never); "
                "refresh and look")
            raise member.error from exc
        if member in self._waiting:
            self._waiting.remove(member)
        member.error = exc
        raise exc

    def _batch_failed(self, member: _Member, taken: list[_Member], exc: BaseException,
                      ) -> None:
        """``_land_batch`` raised ``exc`` in the leading thread, whose change is
        ``member``. The protocol's own errors (OlympiaError) are every unfinished member's
        outcome: nothing landed, or :class:`TransientStorageError` says the outcome is
        unknown. Anything else interrupted the landing: those members are told
        :class:`CommitOutcomeUnknown`, and the leader is interrupted as a caller is."""
        if isinstance(exc, OlympiaError):
            for other in taken:
                if not other.finished:
                    other.error = exc
            return
        unknown = CommitOutcomeUnknown(
            f"the thread landing this commit was interrupted ({exc!r}): whether its "
            "version was created is unknown; refresh and look")
        unknown.__cause__ = exc
        for other in taken:
            if not other.finished and other is not member:
                other.error = unknown
        with self._cond:
            self._interrupted(member, exc)


_GROUPS: weakref.WeakKeyDictionary[CatalogFiles, tuple[int, CommitGroup]] = (
    weakref.WeakKeyDictionary())
_GROUPS_LOCK = threading.Lock()


def commit_group(files: CatalogFiles) -> CommitGroup:
    """The group of commits made through ``files`` in this process (a forked child gets a
    group of its own, never a parent's lock or queue)."""
    with _GROUPS_LOCK:
        entry = _GROUPS.get(files)
        if entry is None or entry[0] != os.getpid():
            entry = _GROUPS[files] = (os.getpid(), CommitGroup())
        return entry[1]


def _disjoint(batch: list[_Member]) -> tuple[list[_Member], list[_Member]]:
    """(the oldest member and, if it joins, the joining members that conflict with none
    before them; the others, in their order)."""
    taken: list[_Member] = []
    left: list[_Member] = []
    keys: set[str] = set()
    for member in batch:
        alone = bool(taken) and not (taken[0].joins and member.joins)
        if alone or (keys & member.change.pending.keys()) or any(
                find_conflict(member.change.actions, t.change.actions) for t in taken):
            left.append(member)
        else:
            taken.append(member)
            keys.update(member.change.pending)
    return taken, left


def _land_batch(files: CatalogFiles, members: list[_Member], newest: int) -> int:
    """Commit disjoint members as one version and set each one's outcome (with the first
    member's options). Every member is checked against the versions after its own base;
    ``newest`` (the newest version this group knows of) only says that the store holds
    versions after the bases, which are then read before the first attempt.

    Returns:
        The newest version known at the end: the one landed, or the newest read (-1: none).
    """
    base = max((m.base for m in members), key=lambda b: b.version)
    if newest > base.version or any(m.base.version != base.version for m in members):
        found, members = _catch_up(files, members, max(newest, base.version))
    else:
        found, members = base, _still_stored(files, members)
    if found is None or not members:
        return found.version if found else -1
    base = found
    options = members[0].options
    deadline = options.clock() + options.timeout_s
    written = _Written()
    attempts = losses = 0
    while True:
        attempts += 1
        try:
            committed = _attempt(files, base, _merged(members), written)
        except FileAlreadyExists:
            losses += 1
        except _Vanished:  # the store went back (a restore): build anew on what it holds
            written = _Written()
            losses += 1
        else:
            files.remember_root(committed)  # for readers; a commit reads roots fresh
            for member in members:
                member.root = committed
            _write_hint(files, committed.version)
            return committed.version
        bound = options.pause(losses)
        if options.clock() + bound >= deadline:
            for member in members:
                member.error = CommitConflict(
                    f"commit gave up after {options.timeout_s:g} s and {attempts} attempts: "
                    f"other writers kept winning (latest seen: version {base.version + 1})",
                    version=base.version + 1)
            return base.version + 1
        # pause, then learn the winners (and that the base is still stored): the next
        # attempt builds on what was just read
        options.sleep(options.jitter(bound))
        found, members = _catch_up(files, members, base.version + 1)
        if found is None or not members:
            return found.version if found else -1
        base = found


def _merged(members: Sequence[_Member]) -> Change:
    """One change holding every member's (disjoint) changes."""
    if len(members) == 1:
        return members[0].change
    pending: dict[str, str | None] = {}
    new_defs: dict[str, bytes] = {}
    for member in members:
        pending.update(member.change.pending)
        new_defs.update(member.change.new_defs)
    return Change(pending, [a for m in members for a in m.change.actions],
                  tuple(row for m in members for row in m.change.rows), new_defs)


def _attempt(files: CatalogFiles, base: Snapshot, change: Change, written: _Written,
             ) -> Root:
    """Write ``change`` as the version after ``base`` and return its root.

    Raises:
        FileAlreadyExists: Another writer took the version (seen before writing, where
            telling is free, or when creating the root).
        _Vanished: A file an earlier attempt wrote, which this one would name, is gone.
    """
    version = base.version + 1
    _lost_already(files, version)
    order = base.catalog_def.order
    created = max(now_millis(), base.created_at_millis + 1)
    tree = change.tree_from.node if change.tree_from else base.root.node
    flushed = apply_changes(base, tree, change.pending, created, written.nodes)
    _lost_already(files, version)
    cdef_path, cdef = change.catalog_def or (base.root.node.catalog_def, base.catalog_def)
    root = Node(flushed.keys, flushed.values, flushed.children, created,
                catalog_def=cdef_path, previous_root=base.root.path,
                rollback_from_root=change.rollback_from, actions=change.rows)
    files_out = {p: d for p, d in change.new_defs.items() if p not in written.defs}
    files_out.update(btree.encode_files(flushed.files, order))
    reused = sorted(flushed.reused | (change.new_defs.keys() & written.defs))
    _lost_already(files, version)
    root_bytes = encode_node(root, order)
    _check_size(cdef, {**files_out, "root": root_bytes})
    try:  # what an earlier attempt wrote is named only if the store still holds it
        files.storage.publish(files_out, version_path(version), root_bytes, present=reused)
    except FileAlreadyExists:
        written.note(base, change, flushed)  # in place: a rebase may refer to them
        raise
    except FileNotFound as exc:
        raise _Vanished(str(exc)) from None
    for path, node in flushed.files.items():  # the next transaction reads them
        base.nodes.remember(path, node)
    return Root(version, version_path(version), root, cdef, root_digest(root_bytes))


def _lost_already(files: CatalogFiles, version: int) -> None:
    """Raise FileAlreadyExists when the storage can tell without a request (local disk,
    memory) that ``version`` is taken: a lost attempt stops before its costly steps."""
    path = version_path(version)
    if files.storage.known_to_exist(path):
        raise FileAlreadyExists("file already exists", files.storage.display(path))


class _Vanished(Exception):
    """A file an earlier attempt of this commit wrote is no longer in the store (a prefix
    restored from a copy): nothing was created, and nothing that attempt wrote is reused."""


def _catch_up(files: CatalogFiles, members: list[_Member], through: int,
              ) -> tuple[Snapshot | None, list[_Member]]:
    """Read the roots from the members' oldest base on from the store (through
    ``through``, known to exist, and further where that is free: :func:`_roots_from`),
    keep the members whose base the store still holds as they read it (:func:`_verified`)
    and check each against the versions after its own base.

    Returns:
        The newest version read (None: not even the oldest base is stored) and the members
        it leaves possible (their bases advanced to it); the others get their
        :class:`CommitConflict`.
    """
    oldest = min(m.base.version for m in members)
    roots = _roots_from(files, oldest, through)
    members = _verified(members, {root.version: root.digest for root in roots})
    if not roots:
        return None, members
    newest = Snapshot(files, roots[-1])
    theirs: dict[int, list[apb.ActionDef]] = {}
    kept = []
    for member in members:
        for version in range(member.base.version + 1, newest.version + 1):
            if version not in theirs:
                theirs[version] = Snapshot(files, roots[version - oldest]).actions()
            member.error = member.error or _conflict(version, theirs[version], member.change)
        if member.error is None:
            member.base = newest
            kept.append(member)
    return newest, kept


def _still_stored(files: CatalogFiles, members: list[_Member]) -> list[_Member]:
    """The members whose base the store still holds as they read it (their bases read
    again, in one batch: :func:`_verified`)."""
    versions = sorted({m.base.version for m in members})
    digests = files.storage.map_reads(files.stored_digest, versions)
    return _verified(members, dict(zip(versions, digests, strict=True)))


def _verified(members: list[_Member], stored: Mapping[int, str | None]) -> list[_Member]:
    """The members whose base version has the same root digest in ``stored`` (version ->
    the digest of the store's root, read now; absent or None: missing). The others get
    their :class:`CommitConflict`: a prefix restored from an earlier copy (and perhaps
    committed to again) no longer holds the version they staged their change on, and
    building on it would lose the store's versions or leave a gap before ours."""
    kept = []
    for member in members:
        version = member.base.version
        digest = stored.get(version)
        if digest == member.base.root.digest:
            kept.append(member)
            continue
        now = "is missing" if digest is None else "holds another root"
        member.error = CommitConflict(
            f"version {version}, which this commit began on, is no longer in the store as "
            f"it was read: the store {now} (expired, or restored from a copy?); begin "
            "again on the latest version", version=version)
    return kept


def _roots_from(files: CatalogFiles, version: int, through: int) -> list[Root]:
    """The roots of ``version`` and the versions after it read from the store, never from
    a cache (a restored prefix may hold other roots under the same names), until one is
    missing: those through ``through`` (known to exist: a create of it failed, or this
    group landed it) and :data:`READ_AHEAD` more at a time, concurrently on remote storage
    (where telling is free, local disk and memory, a missing one is not read)."""
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
        for root in files.storage.map_reads(read, range(first, last + 1)):
            if root is None:
                return roots
            roots.append(root)
        first, last = last + 1, last + READ_AHEAD


def _conflict(version: int, theirs: list[apb.ActionDef],
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
    (their content) -> path, and the definition files."""

    nodes: dict[btree.NodeShape, str] = field(default_factory=dict)
    defs: set[str] = field(default_factory=set)

    def note(self, base: Snapshot, change: Change, flushed: btree.FlushResult) -> None:
        """An attempt's files are in place (its root lost the race)."""
        self.defs.update(change.new_defs)
        for path, node in flushed.files.items():
            base.nodes.remember(path, node)
            self.nodes[btree.shape(node)] = path


def _write_hint(files: CatalogFiles, version: int) -> None:
    """The best-effort write of vn/latest once ``version`` landed."""
    try:
        files.write_hint(LATEST, version)
    except StorageError:
        pass  # vn/latest is only a hint; discovery probes past it


def _check_size(cdef: pb.CatalogDef, files: Mapping[str, bytes]) -> None:
    limit = cdef.node_file_max_size_bytes
    if not limit:
        return
    for path, data in files.items():
        if (path == "root" or path.startswith("node/")) and len(data) > limit:
            raise CatalogError(
                f"node file {path} would be {len(data)} bytes, above the catalog's "
                f"node_file_max_size_bytes={limit}")
