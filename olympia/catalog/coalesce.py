"""The opt-in queue of in-process commits (``Catalog.open(..., coalesce_commits=True)``,
:attr:`CommitOptions.coalesce`): commits that threads make at the same time through one
catalog object land one batch at a time, and disjoint ones share one version.

The protocol stays :mod:`olympia.catalog.commit`'s (:func:`~olympia.catalog.commit.land`
makes the attempts); this module decides which changes land together, and who lands them:

1. :func:`commit` queues the change in the catalog object's :class:`CommitGroup` (one per
   catalog object and process: :func:`commit_group`).
2. A caller that finds no batch under way leads: it takes the oldest queued change and
   every later one that conflicts with none taken (:func:`disjoint`; a catalog-definition
   change, a rollback and a SERIALIZABLE transaction go alone), lands them as one change
   (:func:`_land_batch`, :func:`_merged`) and sets each member's outcome; callers arriving
   meanwhile wait for the next batch.
3. Each member is checked against the versions after its own base (:func:`_catch_up`),
   read before the first attempt unless the members share one base (its version and its
   root) and the group knows of no newer version: then the attempt confirms that base in
   the batch that writes the version's files, as a commit alone does, and if the store no
   longer holds it every member gets the :class:`CommitConflict`. A member whose base the
   store no longer holds as it was read, or that a newer version conflicts with, gets its
   :class:`CommitConflict` and leaves the batch, which goes on without it.

Interrupts: a caller interrupted while its change is queued withdraws it (it never lands);
one interrupted once its change is in the batch being landed, or whose batch's leader was
interrupted, is told :class:`CommitOutcomeUnknown`: it lands in that batch or never.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from olympia._proto import actions_pb2 as apb
from olympia.catalog.actions import find_conflict
from olympia.catalog.commit import (
    Change,
    CommitOptions,
    land,
    rebase_error,
    roots_from,
)
from olympia.catalog.files import CatalogFiles, Root
from olympia.catalog.reader import Snapshot
from olympia.exceptions import CommitConflict, CommitOutcomeUnknown, OlympiaError

# A caller waits for the batch under way in slices of this many seconds. A signal that
# arrives just as an untimed wait begins (after Python's last check for pending signals,
# before the thread blocks) is handled only once the wait ends: the batch's end, however
# late. In slices, the interrupt (a task runner's timeout) is seen within one.
_WAIT_SLICE_S = 0.25


def commit(files: CatalogFiles, base: Snapshot, change: Change, options: CommitOptions,
           ) -> Root:
    """Commit ``change`` through the queue of ``files`` (the catalog object's), alone or
    with other threads' disjoint changes: :func:`olympia.catalog.commit.commit` with
    :attr:`CommitOptions.coalesce`, which documents the outcomes."""
    member = Member(base, change, options)
    commit_group(files).submit(files, member)
    return member.outcome()


@dataclass(eq=False)
class Member:
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

    A caller that finds no batch under way leads: it takes the oldest queued commit and
    every later one that joins it (:func:`disjoint`), lands them as one version
    (:func:`_land_batch`) and sets each member's outcome; callers arriving meanwhile wait.
    A commit left out waits for the next batch, where it is checked against the version
    just landed as against any other. The group keeps only the number of the newest
    version the last batch landed or read: where to look in the store, never what the
    store holds.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: list[Member] = []  # queued, in order (left out of a batch first)
        self._landing: list[Member] = []  # the members of the batch under way
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

    def submit(self, files: CatalogFiles, member: Member) -> None:
        """Commit ``member`` (alone or with others); its outcome is set on return.

        Raises:
            BaseException: An interrupt (see :func:`olympia.catalog.commit.commit`).
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
                        self._cond.wait(_WAIT_SLICE_S)
                    if member.finished:
                        return
                    self._leading = leading = True
                    self._landing, self._waiting = disjoint(self._waiting)
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

    def _interrupted(self, member: Member, exc: BaseException) -> None:
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

    def _batch_failed(self, member: Member, taken: list[Member], exc: BaseException,
                      ) -> None:
        """``_land_batch`` raised ``exc`` in the leading thread, whose change is
        ``member``. The protocol's own errors (OlympiaError) are every unfinished member's
        outcome: nothing landed, or :class:`TransientStorageError` or
        :class:`CommitOutcomeUnknown` says the outcome is unknown. Anything else
        interrupted the landing: those members are told :class:`CommitOutcomeUnknown`,
        and the leader is interrupted as a caller is."""
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


def disjoint(batch: list[Member]) -> tuple[list[Member], list[Member]]:
    """(the oldest member and, if it joins, the joining members that conflict with none
    before them; the others, in their order)."""
    taken: list[Member] = []
    left: list[Member] = []
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


class _Emptied(Exception):
    """Every member of the batch left it (each has its outcome): nothing to land."""

    def __init__(self, newest: int) -> None:
        super().__init__(newest)
        self.newest = newest  # the newest version read (-1: none)


def _land_batch(files: CatalogFiles, members: list[Member], newest: int) -> int:
    """Commit disjoint members as one version and set each one's outcome (with the first
    member's options). Every member is checked against the versions after its own base;
    ``newest`` (the newest version this group knows of) only says that the store holds
    versions after the bases, which are then read before the first attempt.

    Returns:
        The newest version known at the end: the one landed, or the newest read (-1: none).
    """
    base = max((m.base for m in members), key=lambda b: b.version)
    found: Snapshot | None = base
    base_read = False  # one base: the first attempt confirms it in the batch of its files
    if newest > base.version or any(m.base.version != base.version
                                    or m.base.root.digest != base.root.digest for m in members):
        found, members = _catch_up(files, members, max(newest, base.version))
        base_read = True
    if found is None or not members:
        return found.version if found else -1

    def catch_up(_base: Snapshot, through: int) -> tuple[Snapshot, Change]:
        nonlocal members
        read, members = _catch_up(files, members, through)
        if read is None or not members:
            raise _Emptied(read.version if read else -1)
        return read, _merged(members)

    try:
        committed = land(files, found, _merged(members), members[0].options, catch_up,
                         base_read)
    except _Emptied as exc:
        return exc.newest
    except CommitConflict as exc:  # the base moved, or the time budget ran out: all give up
        for member in members:
            member.error = exc
        return exc.version if exc.version is not None else -1
    for member in members:
        member.root = committed
    return committed.version


def _merged(members: Sequence[Member]) -> Change:
    """One change holding every member's (disjoint) changes."""
    if len(members) == 1:
        return members[0].change
    pending: dict[str, str | None] = {}
    new_defs: dict[str, bytes] = {}
    for member in members:
        pending.update(member.change.pending)
        new_defs.update(member.change.new_defs)
    return Change(pending, [a for m in members for a in m.change.actions],
                  tuple(row for m in members for row in m.change.rows), new_defs,
                  external_writes=tuple(w for m in members for w in m.change.external_writes))


def _catch_up(files: CatalogFiles, members: list[Member], through: int,
              ) -> tuple[Snapshot | None, list[Member]]:
    """Read the roots from the members' oldest base on from the store (through
    ``through``, known to exist, and further where that is free:
    :func:`~olympia.catalog.commit.roots_from`) and check each member against the
    versions after its own base (:func:`~olympia.catalog.commit.rebase_error`).

    Returns:
        The newest version read (None: not even the oldest base is stored) and the members
        it leaves possible (their bases advanced to it); the others get their
        :class:`CommitConflict`.
    """
    roots = roots_from(files, min(m.base.version for m in members), through)
    theirs: dict[int, list[apb.ActionDef]] = {}
    kept = []
    for member in members:
        member.error = rebase_error(files, member.base, member.change, roots, theirs)
        if member.error is None:
            kept.append(member)
    if not roots:
        return None, kept
    newest = Snapshot(files, roots[-1])
    for member in kept:
        member.base = newest
    return newest, kept
