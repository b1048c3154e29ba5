"""The commit protocol (spec "Commit a transaction"), shared by transactions and resumed
distributed transactions.

1. Write the new definition files and the changed non-root nodes (concurrently).
2. Create the root ``vn/<v+1>`` exclusively; then write ``vn/latest`` best-effort. On
   local disk steps 1 and 2 are one :meth:`olympia.storage.Storage.publish`: the files are
   written unnamed, then synced and named in the writers' turn, so an attempt that finds
   its version taken when its turn comes has written nothing. Where
   the storage can tell without a request that ``vn/<v+1>`` exists (local disk, memory),
   an attempt looks before each costly step (replaying, encoding the nodes, encoding the
   root, writing) and a lost one stops at the first it reaches.
3. On losing that race the winning root exists, so it is read directly (no discovery from
   the hints), together with the root after it (:data:`READ_AHEAD` roots at a time,
   concurrently on remote storage, until one is missing; where telling that a root is
   missing is free, it is not read): a loser rebases on the newest
   version, not on one another loser has already taken, and learning that costs no extra
   round trip. Each version after the base has its actions checked against ours
   (:func:`olympia.catalog.actions.find_conflict`), taken from the note its writer left on
   this host (:func:`_note`) where there is one, so of those only the newest root is
   parsed; without a conflict the staged changes are replayed onto the newest tree and
   step 2 is tried again at once. A rebase rewrites
   only the nodes whose content changed relative to the new base: a node already written
   by an earlier attempt with the same keys, values and children is referenced again, and
   definition files are written once (by the first attempt that wrote its files).
4. Every version has a winner, so writers cannot livelock; on local disk and memory a
   writer only pauses (jittered, growing from 1 ms to 64 ms) after
   :attr:`CommitOptions.immediate_retries` losses in a row, to stop colliding in lock-step
   with the same rivals; on remote storage it never pauses. Pauses let the writer that
   won a version win the next ones too, so on local disk a commit still losing after
   :attr:`CommitOptions.priority_after_s` holds the writers' turn for its next attempt
   (catching up and landing in it): no writer on one host starves. On remote storage the
   writers of one catalog on one host take the host turn for every attempt
   (:mod:`olympia.storage.host`): each catches up on its neighbours' versions from this
   host's copies, without a request, and does not lose the race to them. A commit gives up
   with :class:`CommitConflict` when its time budget (:attr:`CommitOptions.timeout_s`,
   default 30 s) is spent.

Commits that threads make through one :class:`CatalogFiles` (one catalog object) take turns,
in the order they were submitted (:class:`CommitGroup`): threads of one process never race
one another for a version, each starts from the newest version the process knows, and none
waits behind more than the commits submitted before its own. With
:attr:`CommitOptions.coalesce` a turn is group-committed: disjoint changes share a version,
each caller gets its own outcome (:class:`_Member`), and a conflict, between two callers or
with another writer's version, is reported to the caller it concerns. The group also spans
the processes of one host (:func:`_land_shared`): a writer that finds the turn taken (the
local turn on local disk, the host turn on remote storage) leaves its changes in a letter
(:meth:`olympia.storage.Storage.host_folder`), and the holder lands them with its own and
answers with each member's outcome.

Over 400 lines for one reason: a turn, a group commit and a host's letters run the same
attempt loop (:func:`_land`, members' outcomes set per member), so they live beside it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from google.protobuf.message import DecodeError

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import ReadSet, decode_row, describe, find_conflict
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
from olympia.storage.host import HostTurns
from olympia.tree import btree
from olympia.tree.node import Node, encode_node

DEFAULT_COMMIT_TIMEOUT_S = 30.0
READ_AHEAD = 2  # roots read at once after a lost race: the winner's and the next
LETTER_NAP_S = 0.001  # a writer whose wait for the turn ran out (a stalled holder) naps


def now_millis() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CommitOptions:
    """How a commit retries after losing the root race.

    Attributes:
        timeout_s: The time budget: after this many seconds of lost races the commit gives
            up with :class:`CommitConflict`.
        immediate_retries: Lost races in a row retried at once, before any pause (on local
            disk and memory; on remote storage every lost race is retried at once). Once a
            loser's catch-up read notes instead of roots, 2 beat 8 in 5 of 6 alternating
            runs of 8 local writers (medians 471 and 439 commits/s) at two thirds of the CPU
            per commit: each retry at once mostly lost again to the writer on a streak.
        backoff_s: The first pause's upper bound; it doubles per further loss in a row,
            up to ``max_backoff_s`` (each pause is uniform in [0, bound]).
        max_backoff_s: The largest pause bound. At 8 local writers the one that won a
            version mostly wins the next too (it knows the newest version first), and
            losers that woke every 16 ms took the CPU it needed. A 64 ms bound won 9 of
            10 alternating runs (median 460 against 405 commits/s), and none of its 15
            runs had a p99 over 70 ms (4 of 10 over 300 ms with 16 ms).
        priority_after_s: A commit still losing after this many seconds holds the
            writers' turn (:meth:`olympia.storage.Storage.hold_turn`, local disk) for its
            next attempt: it catches up and lands while the other writers on the host wait
            to name their files, then lose and rebase. With pauses, the writer that won a
            version mostly wins the next, so without this a writer could lose for as long
            as others kept committing: at 8 writers of 2,000 commits each, one gave up
            after 30 s and others waited 10-29 s for a commit. (On remote storage every
            attempt holds the host turn.)
        clock: Monotonic seconds (injectable for tests).
        sleep: Pauses (injectable for tests).
        jitter: Draws a pause in [0, bound] (injectable for tests).
        coalesce: Commits issued concurrently by threads through one catalog object may
            land together in one version (see :class:`CommitGroup`); without it they take
            turns, a version each.
    """

    timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    immediate_retries: int = 2
    backoff_s: float = 0.001
    max_backoff_s: float = 0.064
    priority_after_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[float], float] = field(default=lambda bound: random.uniform(0, bound))
    coalesce: bool = False

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise InvalidArgumentError(f"commit_timeout must be a positive number of seconds, "
                               f"got {self.timeout_s!r}")

    def pause(self, losses: int, remote: bool = False) -> float:
        """The pause bound after ``losses`` lost races in a row (0: retry at once).

        On remote storage (``remote``) there is none: each attempt there takes round trips
        whose varying latency already breaks lock-step, and a pause would only hold back the
        writer that has lost the most (at 8 writers on S3 it doubled the worst writer's p99
        without raising throughput; on local disk pauses raise throughput: benchmarks/README.md).
        """
        beyond = losses - self.immediate_retries
        if remote or beyond <= 0:
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
        StorageError: Writing a file failed (beyond the storage's own retries).
    """
    member = _Member(base, change, options)
    commit_group(files).submit(files, member)
    return member.outcome()


@dataclass(eq=False)
class _Member:
    """One caller's change, how to commit it and, once known, its outcome."""

    base: Snapshot
    change: Change
    options: CommitOptions
    root: Root | None = None
    error: BaseException | None = None

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
    """The commits that threads issue through one :class:`CatalogFiles` (one catalog
    object), landed in turns: first come, first landed.

    A caller that finds no commit under way leads: it takes the oldest change waiting,
    commits it (as the version after the newest this process knows, so it does not lose a
    race to its own process) and tells its caller the outcome; callers arriving meanwhile
    wait for their turn. Changes that may join (:attr:`CommitOptions.coalesce`) are taken
    together, as one version (group commit): a leader takes a joining change only when it
    conflicts with none already taken (its actions, as :func:`find_conflict` judges them,
    and its keys); a change left out waits for the next version, where it is checked
    against the one taken as against any version that won. Each member is checked against
    every version after its own base, so a conflict is reported to its caller alone.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: list[_Member] = []
        self._landing: list[_Member] = []
        self._leading = False
        # the newest version the last batch knew (a Root: a snapshot would hold the files
        # alive, the key of this group's weak entry)
        self._newest: Root | None = None

    @property
    def submitted(self) -> int:
        """Changes submitted whose outcome is not known yet (queued or being committed)."""
        with self._cond:
            return len(self._waiting) + sum(not m.finished for m in self._landing)

    def submit(self, files: CatalogFiles, member: _Member) -> None:
        """Commit ``member`` (alone or with others); its outcome is set on return."""
        with self._cond:
            self._waiting.append(member)
        while True:
            with self._cond:
                while self._leading and not member.finished:
                    self._cond.wait()
                if member.finished:
                    return
                self._leading = True
                self._landing, self._waiting = self._waiting, []
            taken, left = _disjoint(self._landing)
            try:
                self._newest = _land_here(files, taken, self._newest).root
            except BaseException as exc:
                failed = exc if isinstance(exc, Exception) else CatalogError(
                    f"the thread committing this change was interrupted ({exc!r}); whether "
                    "the version was created is unknown: refresh and look")
                for other in taken:
                    if not other.finished:
                        other.error = exc if other is member else failed
                if failed is not exc:
                    raise  # an interrupt of the leading thread
            finally:
                with self._cond:
                    self._waiting[:0] = left  # our own change may be among them
                    self._landing = []
                    self._leading = False
                    self._cond.notify_all()


_GROUPS: weakref.WeakKeyDictionary[CatalogFiles, tuple[int, CommitGroup]] = (
    weakref.WeakKeyDictionary())
_GROUPS_LOCK = threading.Lock()


def commit_group(files: CatalogFiles) -> CommitGroup:
    """The group coalescing commits made through ``files`` in this process (a forked child
    gets a group of its own, never a parent's lock or queue)."""
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


def _land_batch(files: CatalogFiles, members: list[_Member], newest: Root | None,
                hint: bool = True) -> Snapshot:
    """Commit disjoint members as one version after the newest of their bases and
    ``newest`` (the newest version the group knows), each first checked against the
    versions after its own base, with the first member's options (``hint``: as
    :func:`_land`). Returns the newest version known afterwards."""
    base = _newest_base(files, members, newest)
    current = []
    for member in members:
        for version in range(member.base.version + 1, base.version + 1):
            theirs = base.actions() if version == base.version else _actions_of(
                files, base.catalog_def.id, version)
            member.error = _conflict(version, theirs, member.change)
            if member.error is not None:
                break
        else:
            current.append(member)
    return _land(files, base, current, members[0].options, hint)


def _newest_base(files: CatalogFiles, members: list[_Member], newest: Root | None,
                 ) -> Snapshot:
    """The newest of the members' bases and ``newest`` (the newest version the group knows)."""
    known = [Snapshot(files, newest)] if newest else []
    return max([m.base for m in members] + known, key=lambda b: b.version)


def _land_here(files: CatalogFiles, members: list[_Member], newest: Root | None,
               ) -> Snapshot:
    """:func:`_land_batch`, sharing the version with other processes of this host where
    every member may share one and the storage keeps letters (local disk; remote storage
    with host turns): see :func:`_land_shared`."""
    letters = files.storage.host_folder(members[0].base.catalog_def.id) if all(
        m.joins for m in members) else None
    if letters is None:
        return _land_batch(files, members, newest)
    return _land_shared(files, letters, members, newest)


def _land_shared(files: CatalogFiles, letters: HostTurns, members: list[_Member],
                 newest: Root | None) -> Snapshot:
    """Group commit across the processes of one host (coalescing on; the turn is the host
    turn on remote storage, the local turn of ``vn/`` on local disk).

    A writer that can take the turn at once leads: it claims the letters other
    writers left (:meth:`HostTurns.claim`), lands their changes with its own as one version
    (each member checked against the versions after its own base, as in a group of
    threads) and answers each letter with every member's outcome before it lets the turn
    go. A writer that finds the turn taken leaves a letter with its changes instead (on
    remote storage it writes its definition files first: they do not depend on the base,
    and the holder's turn then makes no request for them), and waits for the turn in the
    kernel (:meth:`olympia.storage.Storage.await_turn`), so
    waiting costs no CPU; with the turn it reads its answer, or takes its letter back and
    leads, or, if a leader had claimed it and left no answer (it died while landing it),
    looks in the versions after its base for its own action rows and lands whatever it
    does not find there. A change
    left out of a version (it conflicts with another member's) is posted again. A letter
    no holder took within the time budget is taken back (:class:`CommitConflict`); one
    taken and not answered within twice the budget ends the wait with the outcome unknown.

    Returns:
        The newest version known at the end.
    """
    options = members[0].options
    known = _newest_base(files, members, newest)
    turn = version_path(known.version + 1)  # the turn of vn/ (local disk)
    storage = files.storage
    scope = known.catalog_def.id
    if storage.host_turns:  # definitions first, outside the turn (as _land writes them)
        storage.write_many({p: d for m in members for p, d in m.change.new_defs.items()})
        for member in members:
            member.change = replace(member.change, new_defs={})
    started = options.clock()
    posted: str | None = None
    led: int | None = None  # the version this writer landed as the turn's holder
    while members:
        with (storage.hold_turn(turn, scope, wait=False) if posted is None
              else storage.await_turn(turn, letters)) as held:
            if held:
                if posted is not None and not letters.withdraw(posted):
                    members, landed = _answered(files, members, letters.reply(posted))
                    known = landed or known
                if members:
                    known, led = _lead(files, letters, members, newest)
                break
        if posted is None:
            posted = letters.post(_letter(members))
            if posted is None:  # the folder cannot be used: race as without letters
                return _land_batch(files, members, newest)
            continue
        answer = letters.reply(posted)  # the wait for a stalled holder ran out
        if answer is not None:
            members, landed = _answered(files, members, answer)
            known, posted = landed or known, None
            continue
        waited = options.clock() - started
        if waited >= options.timeout_s and letters.withdraw(posted):
            for member in members:
                member.error = CommitConflict(
                    f"commit gave up after {options.timeout_s:g} s waiting for the writer "
                    "holding this host's turn")
            break
        if waited >= 2 * options.timeout_s:  # claimed by a holder that neither lands nor dies
            for member in members:
                member.error = CatalogError(
                    f"the writer holding this host's turn took this commit's change and "
                    f"has not answered in {waited:.0f} s; whether the version was created "
                    "is unknown: refresh and look")
            break
        options.sleep(LETTER_NAP_S)
    if led is not None:  # once the turn is let go: the next holder need not wait for it
        _write_hint(files, led)
    return known


def _lead(files: CatalogFiles, letters: HostTurns, members: list[_Member],
          newest: Root | None) -> tuple[Snapshot, int | None]:
    """Land ``members`` with the changes of the letters left for this turn's holder, and
    answer every letter (also when landing fails: its members are then posted again).
    Returns the newest version known afterwards, and the one landed (None if none; its
    vn/latest is not written yet)."""
    claimed = [(name, _read_letter(files, body, members[0].options))
               for name, body in letters.claim()]
    theirs = [m for _, letter in claimed for m in letter or []]
    taken, _ = _disjoint(members + theirs)  # ours come first and are disjoint: all taken
    try:
        known = _land_batch(files, taken, newest, hint=False)
        return known, (known.version if any(
            m.root is not None and m.root.version == known.version for m in taken) else None)
    finally:
        for name, letter in claimed:
            letters.answer(name, _outcomes(letter))


def _letter(members: Sequence[_Member]) -> bytes:
    """The letter of ``members``: each one's base version and change."""
    return json.dumps({"changes": [{
        "base": m.base.version,
        "pending": dict(m.change.pending),
        "actions": [base64.b64encode(a.SerializeToString()).decode() for a in m.change.actions],
        "rows": [list(row) for row in m.change.rows],
        "defs": {path: base64.b64encode(data).decode()
                 for path, data in m.change.new_defs.items()},
    } for m in members]}).encode()


def _read_letter(files: CatalogFiles, body: bytes | None, options: CommitOptions,
                 ) -> list[_Member] | None:
    """The members a letter holds, or None where it is not one this module writes (or
    names a base version that cannot be read): its writer then lands it alone."""
    try:
        changes = json.loads(body or b"")["changes"]
        members = []
        for c in changes:
            pending, rows, defs = c["pending"], c["rows"], c["defs"]
            if not (type(c["base"]) is int and isinstance(pending, dict)
                    and isinstance(defs, dict) and isinstance(rows, list)
                    and all(isinstance(k, str) and _is_def(v, True) for k, v in pending.items())
                    and all(_is_def(path) and isinstance(d, str) for path, d in defs.items())
                    and all(isinstance(r, list) and len(r) == 2
                            and all(isinstance(x, str) for x in r) for r in rows)):
                return None
            actions = []
            for text in c["actions"]:
                action = apb.ActionDef()
                action.ParseFromString(base64.b64decode(text, validate=True))
                actions.append(action)
            change = Change(pending, actions, tuple((k, v) for k, v in rows),
                            {path: base64.b64decode(d, validate=True) for path, d in defs.items()})
            members.append(_Member(Snapshot(files, files.read_root(c["base"])), change, options))
    except (ValueError, TypeError, KeyError, DecodeError, CatalogError, StorageError):
        return None
    return members or None


def _is_def(path: object, or_none: bool = False) -> bool:
    """Whether ``path`` names a definition file (or is None, if ``or_none``)."""
    if path is None:
        return or_none
    if not isinstance(path, str):
        return False
    parts = path.split("/")
    return parts[0] == "def" and len(parts) > 1 and all(p not in ("", ".", "..") for p in parts)


def _outcomes(members: list[_Member] | None) -> bytes:
    """The answer to a letter: each member's version or conflict; a member neither
    landed nor refused (left out, or the landing failed) is to be posted again. No
    members (an unreadable letter): its writer lands alone."""
    if members is None:
        return json.dumps({"alone": True}).encode()
    outcomes: list[dict[str, object]] = []
    for m in members:
        if m.root is not None:
            outcomes.append({"version": m.root.version})
        elif isinstance(m.error, CommitConflict):
            outcomes.append({"conflict": str(m.error), "object": m.error.object_name,
                             "version": m.error.version})
        else:
            outcomes.append({"again": True})
    return json.dumps({"outcomes": outcomes}).encode()


def _answered(files: CatalogFiles, members: list[_Member], answer: bytes | None,
              ) -> tuple[list[_Member], Snapshot | None]:
    """Set the outcomes an answer gives; (the members still to land, the newest version
    landed among them). No answer to a claimed letter: the leader is gone, and the
    members found in a version after their base (by their action rows) landed there."""
    try:
        outcomes = json.loads(answer)["outcomes"] if answer is not None else None
        if outcomes is not None and len(outcomes) != len(members):
            outcomes = None
    except (ValueError, TypeError, KeyError):
        outcomes = None
    landed: list[Root] = []
    left = []
    for i, member in enumerate(members):
        outcome = outcomes[i] if outcomes is not None else None
        if answer is None:
            member.root = _found(files, member)
        elif isinstance(outcome, dict) and type(outcome.get("version")) is int:
            if "conflict" in outcome:
                member.error = CommitConflict(str(outcome["conflict"]),
                                              str(outcome.get("object") or ""),
                                              outcome["version"])
            else:
                member.root = files.read_root(outcome["version"])
        if member.root is not None:
            landed.append(member.root)
        elif member.error is None:
            left.append(member)
    if answer is not None and outcomes is None:  # "alone", or unreadable: land it here
        return [], _land_batch(files, left, None) if left else None
    newest = max(landed, key=lambda root: root.version, default=None)
    return left, Snapshot(files, newest) if newest else None


def _found(files: CatalogFiles, member: _Member) -> Root | None:
    """The version after the member's base recording all of its action rows, if any
    (asked of the store where this host's copies do not tell: a holder may have died
    between creating the root and copying it)."""
    rows = set(member.change.rows)
    version = member.base.version + 1
    while rows and files.storage.probe(version_path(version)):
        root = files.read_root(version)
        if rows <= set(root.node.actions):
            return root
        version += 1
    return None


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


def _land(files: CatalogFiles, base: Snapshot, members: list[_Member],
          options: CommitOptions, hint: bool = True) -> Snapshot:
    """Commit the members' changes as one version after ``base`` (or after the versions
    that win the races) and set each member's outcome: the committed root, or the
    conflict that took it out; then write vn/latest, unless not ``hint`` (a holder of the
    turn writes it once it lets the turn go). Storage and size errors are raised for all
    of them.

    Returns:
        The newest version known at the end: the one committed, or the last one read.
    """
    storage = files.storage
    started = options.clock()
    deadline = started + options.timeout_s
    written = _Written()
    every = storage.host_turns  # remote: this host's writers take turns for every attempt
    if every:  # definition files do not depend on the base: written before the wait
        defs = {path: data for m in members for path, data in m.change.new_defs.items()}
        storage.write_many(defs)
        written.defs.update(defs)
    attempts = losses = 0
    while members:
        attempts += 1
        overdue = losses > 0 and options.clock() - started >= options.priority_after_s
        try:
            if overdue or every:  # caught up before the wait, the turn is held briefly
                base, members = _caught_up(files, base, members)
            turn = (storage.hold_turn(version_path(base.version + 1), base.catalog_def.id)
                    if (overdue or every) and members else contextlib.nullcontext(False))
            with turn as held:
                if held:
                    base, members = _caught_up(files, base, members)
                if not members:
                    break
                version, root, cdef = _attempt(files, base, _merged(members), written)
        except FileAlreadyExists:
            losses += 1
            base, members = _rebased(files, base, *_newest(files, base.version + 1), members)
        else:
            committed = Root(version, version_path(version), root, cdef)
            files.remember_root(committed)
            _note(files, committed)
            if hint:
                _write_hint(files, version)
            for member in members:
                member.root = committed
            return Snapshot(files, committed)
        bound = options.pause(losses, storage.remote)
        if members and options.clock() + bound >= deadline:
            for member in members:
                member.error = CommitConflict(
                    f"commit gave up after {options.timeout_s:g} s and {attempts} attempts: "
                    f"other writers kept winning (latest seen: version {base.version})",
                    version=base.version)
            return base
        if members and bound:
            options.sleep(options.jitter(bound))
    return base


def _write_hint(files: CatalogFiles, version: int) -> None:
    """The best-effort write of vn/latest once ``version`` landed."""
    try:
        files.write_hint(LATEST, version)
    except StorageError:
        pass  # vn/latest is only a hint; discovery probes past it


def _attempt(files: CatalogFiles, base: Snapshot, change: Change, written: _Written,
             ) -> tuple[int, Node, pb.CatalogDef]:
    """Write ``change`` as the version after ``base``: (that version, its root node, its
    catalog definition).

    Raises:
        FileAlreadyExists: Another writer took the version (seen before writing, where
            telling is free, or when creating the root).
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
    _lost_already(files, version)
    root_bytes = encode_node(root, order)
    _check_size(cdef, {**files_out, "root": root_bytes})
    _lost_already(files, version)
    files.storage.publish(files_out, version_path(version), root_bytes,
                          partial(written.note, base, change, flushed))
    return version, root, cdef


def _rebased(files: CatalogFiles, base: Snapshot, newest: int, read: Mapping[int, Root],
             members: list[_Member]) -> tuple[Snapshot, list[_Member]]:
    """The version ``newest`` (after ``base``; ``base`` itself if not newer), and the
    members that the versions after ``base`` up to it leave possible. Roots already
    ``read`` are used as they are; of the others only the newest is read: the actions of
    those before it come from this host's notes where its writers left them
    (:func:`_actions_of`)."""
    if newest <= base.version:
        return base, members
    scope = base.catalog_def.id
    for version in range(base.version + 1, newest):
        if members:
            root = read.get(version)
            theirs = (Snapshot(files, root).actions() if root is not None
                      else _actions_of(files, scope, version))
            members = _without_conflicts(version, theirs, members)
    root = read.get(newest) or files.read_root(newest)
    base = Snapshot(files, root)
    return base, _without_conflicts(newest, base.actions(), members)


def _caught_up(files: CatalogFiles, base: Snapshot, members: list[_Member],
               ) -> tuple[Snapshot, list[_Member]]:
    """The newest version after ``base`` that the storage can tell exists without a request
    (local disk, memory; on remote storage, what this host's copies know: see
    :meth:`olympia.storage.Storage.hold_turn`; ``base`` if none), and the members its
    versions leave possible."""
    newest = base.version
    while files.storage.known_to_exist(version_path(newest + 1)):
        newest += 1
    return _rebased(files, base, newest, {}, members)


def _actions_of(files: CatalogFiles, scope: str, version: int) -> list[apb.ActionDef]:
    """The actions ``version`` of the catalog ``scope`` (its id) recorded: from the note its
    writer left on this host (:func:`_note`), else from its root.

    Raises:
        NoSuchVersionError: There is no note and the root cannot be read.
    """
    folder = files.storage.host_folder(scope)
    note = folder.noted(version) if folder is not None else None
    rows = _noted_rows(note) if note is not None else None
    if rows is None:
        return Snapshot(files, files.read_root(version)).actions()
    where = files.storage.display(version_path(version))
    return [decode_row(value, where) for _, value in rows]


def _note(files: CatalogFiles, root: Root) -> None:
    """Note the version just landed, with the action rows its root records, in this host's
    folder of the catalog (:meth:`olympia.storage.host.HostTurns.note`): the other writers
    here then check their changes against it without parsing the root."""
    folder = files.storage.host_folder(root.catalog_def.id)
    if folder is not None:
        folder.note(root.version, json.dumps(root.node.actions).encode())


def _noted_rows(note: bytes) -> list[tuple[str, str]] | None:
    """The action rows of a note (:func:`_note`), or None where it holds anything else."""
    try:
        rows = json.loads(note)
    except ValueError:
        return None
    if not (isinstance(rows, list) and all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r)
            for r in rows)):
        return None
    return [(key, value) for key, value in rows]


@dataclass
class _Written:
    """What earlier attempts of one commit wrote, for a rebase to reuse: nodes by shape
    (their content) -> path, and the definition files."""

    nodes: dict[btree.NodeShape, str] = field(default_factory=dict)
    defs: set[str] = field(default_factory=set)

    def note(self, base: Snapshot, change: Change, flushed: btree.FlushResult) -> None:
        """An attempt's files are in place (its root not yet: it may still lose)."""
        self.defs.update(change.new_defs)
        for path, node in flushed.files.items():
            base.nodes.remember(path, node)
            self.nodes[btree.shape(node)] = path


def _lost_already(files: CatalogFiles, version: int) -> None:
    """Raise FileAlreadyExists when the storage can tell without a request (local disk,
    memory) that ``version`` is taken: an attempt checks before each costly step, so a
    lost one stops at the next (at 8 writers on local disk, a third of the attempts that
    replayed a change found their version taken before they encoded the root)."""
    path = version_path(version)
    if files.storage.known_to_exist(path):
        raise FileAlreadyExists("file already exists", files.storage.display(path))


def _newest(files: CatalogFiles, won: int) -> tuple[int, dict[int, Root]]:
    """The newest version, from ``won`` (a version another writer created), and the roots
    read to learn it. On remote storage they are read :data:`READ_AHEAD` at a time,
    concurrently: the winner's together with the next, so learning that the next is taken
    too costs no extra round trip, and a rebase lands on the newest version, not on one
    another loser has already taken. Where the storage tells for free that a root exists
    (local disk, memory), none is read here.

    Raises:
        NoSuchVersionError: ``won`` cannot be read (remote storage).
    """
    storage = files.storage
    if not storage.remote:
        newest = won
        while storage.known_to_exist(version_path(newest + 1)):
            newest += 1
        return newest, {}

    def read(version: int) -> Root | None:
        try:
            return files.read_root(version)
        except NoSuchVersionError:
            if version == won:
                raise
            return None

    roots: dict[int, Root] = {}
    while True:
        window = range(won + len(roots), won + len(roots) + READ_AHEAD)
        for root in storage.map_reads(read, window):
            if root is None:
                return won + len(roots) - 1, roots
            roots[root.version] = root


def _without_conflicts(version: int, theirs: list[apb.ActionDef], members: list[_Member],
                       ) -> list[_Member]:
    """The members whose changes ``theirs`` (the actions of a newer ``version``) leave
    possible; the others get their :class:`CommitConflict`."""
    kept = []
    for member in members:
        member.error = _conflict(version, theirs, member.change)
        if member.error is None:
            kept.append(member)
    return kept


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


def _check_size(cdef: pb.CatalogDef, files: Mapping[str, bytes]) -> None:
    limit = cdef.node_file_max_size_bytes
    if not limit:
        return
    for path, data in files.items():
        if (path == "root" or path.startswith("node/")) and len(data) > limit:
            raise CatalogError(
                f"node file {path} would be {len(data)} bytes, above the catalog's "
                f"node_file_max_size_bytes={limit}")
