"""Transactions: stage changes and read your own writes; commit hands them to
:mod:`olympia.catalog.commit`, which owns the commit protocol.

The write vocabulary (namespaces, tables, views) is :class:`olympia.catalog.writes.ObjectWrites`;
this module holds the staged state it writes into, the reads that see it, the catalog-level
changes (catalog definition, rollback), the hand-off of staged changes to another process,
and the transaction's life (commit, abort, hooks). A commit tells whoever began the
transaction about the new version through the ``on_commit`` callback it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from google.protobuf.message import Message

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.commit import Change, Check, CommitOptions, commit, now_millis
from olympia.catalog.files import CatalogFiles, Root
from olympia.catalog.keys import ObjectRef, ObjectType, def_path
from olympia.catalog.reader import Snapshot
from olympia.catalog.writes import ObjectWrites
from olympia.exceptions import CatalogError, CorruptFileError, OlympiaError, StorageError
from olympia.tree import btree
from olympia.tree.node import Node

__all__ = ["Transaction", "now_millis"]


class Transaction(ObjectWrites):
    """A unit of change against one catalog; use as ``with catalog.transaction() as txn:``.

    Args:
        files: The catalog's files.
        base: The version the transaction begins on (its reads see this version plus its
            own staged writes).
        isolation: ``pb.SNAPSHOT`` or ``pb.SERIALIZABLE``.
        on_commit: Called with the new root after a successful commit (a
            :class:`~olympia.catalog.catalog.Catalog` advances its loaded version).
        options: How the commit retries after losing the root race (its time budget).
        lands: Where a commit goes instead of a new version (a statement of a distributed
            transaction adds its change to that transaction): takes the change, returns
            the root it now reads from.
    """

    def __init__(self, files: CatalogFiles, base: Snapshot, isolation: int, *,
                 on_commit: Callable[[Root], None] | None = None,
                 options: CommitOptions | None = None,
                 lands: Callable[[Change], Root] | None = None) -> None:
        self.files = files
        self.base = base
        self.codec = base.codec
        self.isolation = isolation
        self.version: int | None = None
        self._on_commit = on_commit
        self._options = options or CommitOptions()
        self._lands = lands or (lambda change: commit(self.files, self.base, change,
                                                      self._options))
        self._checks: list[Check] = []
        self._refusal: OlympiaError | None = None  # what a check raised, ending the commit
        self._pending: dict[str, str | None] = {}
        self._new_defs: dict[str, bytes] = {}
        self._actions: list[apb.ActionDef] = []
        self._info: dict[str, str] = {}
        self._reads = actions.ReadSet() if isolation == pb.SERIALIZABLE else None
        self._catalog_def: tuple[str, pb.CatalogDef] | None = None
        self._tree_from: Root | None = None
        self._rollback_from: str | None = None
        self._external: list[Callable[[], object]] = []
        self._state = "open"
        self._corrupt: CorruptFileError | None = None  # a read failed verification
        self.before_commit: list[Callable[[Transaction], None]] = []
        self.after_end: list[Callable[[Transaction], None]] = []

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and self._state == "open":
            self.commit()
        else:
            self.abort()

    @property
    def actions(self) -> list[apb.ActionDef]:
        """The actions staged so far."""
        return list(self._actions)

    @property
    def catalog_def(self) -> pb.CatalogDef:
        return self._catalog_def[1] if self._catalog_def else self.base.catalog_def

    # --- reads (see your own writes) ------------------------------------------------------

    def _tree_root(self, base: Snapshot) -> Node:
        return self._tree_from.node if self._tree_from else base.root.node

    @contextmanager
    def _verifying(self) -> Iterator[None]:
        """Remember a read that failed verification: commit then refuses (ruling 13), even
        if the caller caught the error."""
        try:
            yield
        except CorruptFileError as exc:
            self._corrupt = exc
            raise

    def _get(self, ref: ObjectRef) -> str | None:
        key = self.codec.key(ref)
        if self._reads is not None:
            self._reads.objects.add(ref)
        if key in self._pending:
            return self._pending[key]
        with self._verifying():
            return btree.get(self.base.nodes, self._tree_root(self.base), key)

    def _read_defs(self, paths: list[str], cls: type[Any]) -> list[Any]:
        with self._verifying():
            return super()._read_defs(paths, cls)

    def _scan(self, kind: ObjectType, namespace: str | None) -> Iterator[tuple[str, str]]:
        if self._reads is not None:
            self._reads.listings.add((kind, namespace or ""))
        prefix = self._prefix(kind, namespace)
        with self._verifying():
            merged = dict(btree.scan_prefix(self.base.nodes, self._tree_root(self.base), prefix))
        staged = sorted((k, v) for k, v in self._pending.items() if k.startswith(prefix))
        for key, value in staged:
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        yield from sorted(merged.items())

    # --- staging helpers ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state != "open":
            raise CatalogError(f"transaction is already {self._state}")

    def _put(self, ref: ObjectRef, message: Message) -> str:
        content = message.SerializeToString(deterministic=True)
        path = def_path(ref, content)
        self._new_defs[path] = content
        self.files.remember_def(path, message)
        self._pending[self.codec.key(ref)] = path
        return path

    def _delete(self, ref: ObjectRef) -> None:
        self._pending[self.codec.key(ref)] = None

    def _record(self, type_: int, ref: ObjectRef | None, def_path_: str = "",
                **payload: Any) -> None:
        self._actions.append(actions.make(type_, ref, def_path_, **payload))

    def write_with_commit(self, write: Callable[[], object]) -> None:
        """Have the commit make a write outside the catalog that the staged definitions
        name (a table's metadata file): in the batch that writes the version's new files,
        so that it costs no round trip of its own, and always before the root that names
        it (a statement of a distributed transaction: before its running tree).

        Args:
            write: Makes the file. Run again by a retry, so it succeeds when its own earlier
                call did; it fails with a :class:`StorageError` that is neither
                ``FileNotFound`` nor ``FileAlreadyExists`` (those tell of the catalog's
                own files).

        Raises:
            CatalogError: The transaction is not open.
        """
        self._check_open()
        self._external.append(write)

    def annotate(self, **info: str) -> None:
        """Attach metadata (spec digest, git commit, tool) recorded with the version."""
        self._check_open()
        self._info.update({k: str(v) for k, v in info.items()})

    def require(self, check: Check) -> None:
        """Add a condition every version the commit lands after must meet beyond the
        actions' conflicts: after a lost race, ``check(before, after)`` is called with each
        version landed since the last attempt's base (``after``) and the one before it,
        before the next attempt writes anything; what it raises ends the commit, nothing of
        it landed (:attr:`refusal`). A transaction with a check never shares a version with
        other threads' changes (``coalesce_commits``). A statement of a distributed
        transaction is checked the same way against the running view of the statements
        added since it read (``before`` and ``after`` are then running views).

        Args:
            check: Raises the caller's error (an :class:`OlympiaError`) when this
                transaction may not land after ``after``, as it would have at staging had
                ``after`` been the base.

        Raises:
            CatalogError: The transaction is not open.
        """
        self._check_open()
        self._checks.append(check)

    @property
    def refusal(self) -> OlympiaError | None:
        """What a check (:meth:`require`) raised to end the commit, if one did."""
        return self._refusal

    def _check_all(self, before: Snapshot, after: Snapshot) -> None:
        try:
            for check in self._checks:
                check(before, after)
        except OlympiaError as exc:
            self._refusal = exc
            raise

    # --- catalog-level changes (used by versions and exports) -----------------------------

    def set_catalog_def(self, catalog_def: pb.CatalogDef, action: apb.ActionDef) -> None:
        """Replace the catalog definition in this version, recording ``action``."""
        self._check_open()
        content = catalog_def.SerializeToString(deterministic=True)
        path = def_path(None, content)
        self._new_defs[path] = content
        self.files.remember_def(path, catalog_def)
        self._catalog_def = (path, catalog_def)
        self._actions.append(action)

    def restore_tree(self, root: Root, action: apb.ActionDef) -> None:
        """Make this version's tree identical to ``root``'s (a rollback); nothing else may be
        staged in the same transaction."""
        self._check_open()
        if self._actions or self._pending:
            raise CatalogError("a rollback must be the only change in its transaction")
        self._tree_from = root
        self._rollback_from = self.base.root.path
        self._actions.append(action)

    # --- commit --------------------------------------------------------------------------

    def abort(self) -> None:
        """Discard the transaction: no version will refer to anything it staged.

        Staging writes nothing. A commit that failed (a conflict, a storage error) may
        already have written its definition and node files before the root race; they stay
        behind unreferenced, and expiry removes them once older than its grace period.
        """
        if self._state == "open":
            self._state = "aborted"
            self._ended()

    def _fail(self) -> None:
        self._state = "aborted"
        self._ended()

    def _ended(self) -> None:
        for hook in self.after_end:
            hook(self)

    @property
    def state(self) -> str:
        """``open``, ``committed``, ``aborted`` or ``saved`` (handed to another process)."""
        return self._state

    @property
    def has_reads(self) -> bool:
        """Whether this SERIALIZABLE transaction has read anything its commit must check."""
        return self._reads is not None and bool(self._reads.objects or self._reads.listings)

    def restore_staged(self, pending: Mapping[str, str | None],
                       recorded: Sequence[apb.ActionDef]) -> None:
        """Stage changes saved by another process (their def files already exist)."""
        self._check_open()
        if self._actions:
            raise CatalogError("restore_staged needs a transaction with nothing staged")
        self._pending.update(pending)
        for action in recorded:
            if action.type == A.TRANSACTION_INFO:
                self._info.update(action.info)
            else:
                self._actions.append(action)

    def mark_saved(self) -> None:
        """This process hands the transaction over; it can no longer be used here."""
        self._check_open()
        self._state = "saved"

    def _recorded(self) -> list[apb.ActionDef]:
        """The staged actions, then the annotations as one TRANSACTION_INFO action."""
        recorded = list(self._actions)
        if self._info:
            recorded.append(actions.make(A.TRANSACTION_INFO, None, info=self._info))
        return recorded

    def change(self) -> Change:
        """The staged changes as a commit applies them."""
        rows = tuple(actions.encode_row(self.codec, a) for a in self._recorded())
        return Change(self._pending, self._actions, rows, self._new_defs, self._catalog_def,
                      self._tree_from, self._rollback_from, self._reads,
                      self._check_all if self._checks else None, tuple(self._external))

    def commit(self) -> int:
        """Commit as one new version and return it (the base version if nothing changed).

        Raises:
            CommitConflict: A newer version conflicts, or the commit's time budget ran out
                while other writers kept winning.
            CorruptFileError: A read of this transaction failed verification.
            CatalogError: The transaction is not open, or a node would exceed the
                catalog's size limit.
            CommitOutcomeUnknown: An exception (its ``__cause__``: a task timeout, say)
                interrupted this commit once its root's create may have happened (with
                ``coalesce_commits``: once its change was in the batch being landed): it
                has landed or never will; refresh and look. One that arrives earlier (or,
                coalesced, while the change is still queued) is raised as it is: nothing
                lands.
            TransientStorageError: The root's create kept failing and whether it landed
                could not be learned (outcome unknown); the transaction stays open.
            StorageError: Writing failed; the transaction stays open.
        """
        self._check_open()
        if self._corrupt is not None:
            self._fail()
            raise CorruptFileError(self._corrupt.path, f"{self._corrupt.reason} (a read of "
                                   "this transaction failed verification: nothing committed)")
        for hook in self.before_commit:
            hook(self)
        if not self._actions:
            self._state = "committed"
            self.version = self.base.version
            self._ended()
            return self.version
        try:
            committed = self._lands(self.change())
        except StorageError:
            raise
        except OlympiaError:
            self._fail()
            raise
        self._state = "committed"
        self.version = committed.version
        if self._on_commit is not None:
            self._on_commit(committed)
        self._ended()
        return committed.version
