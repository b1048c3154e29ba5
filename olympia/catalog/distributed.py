"""Distributed transactions: a named transaction that statements from any process extend,
committed as ONE catalog version (docs/ARCHITECTURE.md, "Distributed transactions").

The record ``dtxn/<id>.binpb`` names the beginning root and the running root: a node file
whose tree is the beginning version plus every statement added so far, and whose action rows
are those statements' actions, then their annotations as one ``TRANSACTION_INFO`` row (as a
version records them). A statement reads the running root, writes a new running tree (new
files only), then replaces the record only if it still holds what the statement read
(:meth:`Storage.replace`, FORMAT-DECISIONS ruling 16). One that loses checks its actions
against those added meanwhile, and builds again on the new running root or reports a
conflict.

Life of a record: OPEN (takes statements) -> COMMITTING (sealed: it lands as one version
through the normal protocol from the beginning version, so conflicts are checked against
everything committed since, and by the rules of the catalog object's :data:`Requirement`s;
then the record is deleted) or ABORTING (then deleted). The version carries the annotations
``transaction`` and ``transaction_instance``; a second committer of a sealed record finds by
them that it already landed. A record past its expiry
time takes no statements and no commit; the expiry job removes it.

Over 400 lines because one class runs a record's whole life (begin, statements, seal,
landing, abort) and every step is a compare-and-replace of the same record under the same
checks (alive, not expired, landable, not already landed); split by step, each part would
repeat the others' reads and checks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A, find_conflict
from olympia.catalog.commit import Change, CommitOptions, apply_changes, now_millis
from olympia.catalog.files import CatalogFiles, Root, parse_def
from olympia.catalog.keys import dtxn_path, path_version
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import (
    AlreadyExistsError,
    CatalogError,
    CommitConflict,
    CorruptFileError,
    FileAlreadyExists,
    FileNotFound,
    InvalidArgumentError,
    InvalidNameError,
    NoSuchTransactionError,
    OlympiaError,
    TransactionExpiredError,
)
from olympia.tree import btree
from olympia.tree.node import Node, decode_node, encode_node

#: Annotations a committed transaction's version carries.
TRANSACTION_ID = "transaction"
TRANSACTION_INSTANCE = "transaction_instance"
NOT_DISTRIBUTABLE = {A.CATALOG_ROLLBACK, A.CATALOG_EXPORT, A.CATALOG_ALTER}
MAX_ID_BYTES = 128
#: A commit starts only while its record has more than the commit's time budget plus this
#: margin left before its expiry (a last storage request may still be under way when the
#: budget ends; clocks of hosts differ): so a record past its expiry can never land any more,
#: and an abort may end one whose committer died after sealing it.
LANDING_MARGIN_MS = 5 * 60 * 1000
STATES = {pb.OPEN: "open", pb.COMMITTING: "committing", pb.ABORTING: "aborting"}

Requirement = Callable[[Transaction], None]
"""A rule of a layer above the catalog that every landing meets: called with the landing
transaction (:meth:`DistributedTransaction.landing`: the beginning version plus everything
the record staged, as read from the store) before it commits; it adds its checks of the
versions landed since the beginning (:meth:`Transaction.require`)."""


def check_transaction_id(txn_id: str) -> str:
    """Refuse an id that is not 1-128 bytes of letters, digits, ``-``, ``_`` and ``.``
    (not starting with ``.``): ids name files and appear in URLs and SQL."""
    if not (0 < len(txn_id.encode()) <= MAX_ID_BYTES and txn_id[0] != "."
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in txn_id)):
        raise InvalidNameError(
            f"invalid transaction id {txn_id!r}: use 1-{MAX_ID_BYTES} letters, digits, '-', "
            "'_' or '.', not starting with '.'")
    return txn_id


def check_distributable(change: Change) -> list[apb.ActionDef]:
    """The actions ``change`` records, if it may join a distributed transaction.

    Raises:
        InvalidArgumentError: It holds catalog-level changes (a rollback, an export,
            catalog properties): these are committed directly.
    """
    recorded = [actions.decode_row(value, "a staged change") for _, value in change.rows]
    if change.catalog_def or change.tree_from or any(
            a.type in NOT_DISTRIBUTABLE for a in recorded):
        raise InvalidArgumentError("catalog-level changes (rollback, export, catalog "
                                   "properties) cannot join a distributed transaction; "
                                   "commit them directly")
    return recorded


@dataclass(frozen=True)
class _Read:
    """A record as read from the store: parsed, and its bytes (what a replace compares)."""

    record: pb.DistributedTransactionDef
    raw: bytes


class DistributedTransaction:
    """A named catalog transaction that statements from any process add to, committed as
    one version. Get one from :meth:`Catalog.begin_transaction` or
    :meth:`Catalog.distributed_transaction`.

    Args:
        files: The catalog's files.
        read: The record as read.
        options: How statements retry after losing the record's race, and how the commit
            retries after losing the root race (their time budget).
        on_commit: Called with the root the commit landed.
        requirements: The rules every landing meets (:data:`Requirement`).
    """

    def __init__(self, files: CatalogFiles, read: _Read, options: CommitOptions,
                 on_commit: Callable[[Root], None] | None = None,
                 requirements: Sequence[Requirement] = ()) -> None:
        self.files = files
        self.storage = files.storage
        self._read = read
        self._options = options
        self._on_commit = on_commit
        self._requirements = tuple(requirements)

    def __repr__(self) -> str:
        return f"DistributedTransaction({self.id!r}, {self.state})"

    # --- the record ---------------------------------------------------------------------

    @property
    def record(self) -> pb.DistributedTransactionDef:
        """The record as last read (:meth:`refresh` reads it again)."""
        return self._read.record

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def state(self) -> str:
        """``open``, ``committing`` or ``aborting``, as last read."""
        return STATES.get(self.record.state, "unknown")

    @property
    def path(self) -> str:
        return dtxn_path(self.id)

    def refresh(self) -> DistributedTransaction:
        """Read the record again (it changes with every statement); returns ``self``.

        Raises:
            NoSuchTransactionError: It was committed or aborted meanwhile.
        """
        self._read = read_record(self.files, self.id)
        return self

    @property
    def expired(self) -> bool:
        return now_millis() > self.record.expire_at_millis

    def _check_alive(self, record: pb.DistributedTransactionDef) -> None:
        if now_millis() > record.expire_at_millis:
            raise TransactionExpiredError(
                f"distributed transaction {record.id!r} expired at {record.expire_at_millis} "
                "(epoch ms); start a new transaction")

    def _check_time(self, record: pb.DistributedTransactionDef) -> None:
        """Refuse to start landing ``record`` unless its whole time budget (and the margin)
        ends before the record expires.

        Raises:
            TransactionExpiredError: Too close to (or past) its expiry.
        """
        left = record.expire_at_millis - now_millis()
        need = int(self._options.timeout_s * 1000) + LANDING_MARGIN_MS
        if left <= need:
            raise TransactionExpiredError(
                f"distributed transaction {record.id!r} "
                + ("expired" if left < 0 else f"expires in {left // 1000} s, less than a "
                   f"commit may take ({need // 1000} s: its time budget and a margin)")
                + ": it cannot be committed any more; abort it")

    def _check_landable(self, record: pb.DistributedTransactionDef) -> None:
        """:meth:`_check_time`, and refuse a record whose versions since its beginning
        expired (its conflicts could not be checked).

        Raises:
            TransactionExpiredError: Too close to (or past) its expiry.
            CommitConflict: Versions since its beginning expired.
        """
        self._check_time(record)
        oldest = self.files.oldest_version()
        if oldest > record.beginning_version + 1:
            raise CommitConflict(
                f"distributed transaction {record.id!r}: versions committed since it began "
                f"(version {record.beginning_version}) have expired (the oldest kept is "
                f"{oldest}), so its conflicts cannot be checked")

    def check_open(self, record: pb.DistributedTransactionDef | None = None) -> None:
        """Refuse a record (default: as last read) that is not open or has expired.

        Raises:
            TransactionExpiredError: It expired.
            CatalogError: It is being committed or aborted.
        """
        record = record or self.record
        if record.state != pb.OPEN:
            raise CatalogError(f"distributed transaction {record.id!r} is "
                               f"{STATES.get(record.state, 'closed')}: it takes no more changes")
        self._check_alive(record)

    # --- the trees ----------------------------------------------------------------------

    def beginning(self, record: pb.DistributedTransactionDef | None = None) -> Snapshot:
        """The version the transaction began on (as ``record`` names it; default: the
        record as last read)."""
        record = record or self.record
        version = path_version(record.beginning_root_node_file_path)
        if version is None:
            raise CorruptFileError(self.storage.display(self.path),
                                   "beginning root is not a vn/ path")
        return Snapshot(self.files, self.files.read_root(version))

    def _running(self, beginning: Snapshot, record: pb.DistributedTransactionDef) -> Root:
        path = record.running_root_node_file_path
        where = self.storage.display(path)
        try:
            data = self.storage.read(path)
        except FileNotFound:
            raise CorruptFileError(self.storage.display(self.path),
                                   f"its running root {path} is missing") from None
        node = decode_node(data, where, beginning.catalog_def.order, root=True)
        return Root(beginning.version, path, node, beginning.catalog_def)

    def view(self) -> Snapshot:
        """A read-only view: the beginning version plus every statement added so far
        (the record is read again first)."""
        self.refresh()
        return self._view()

    def _view(self) -> Snapshot:
        """The running view of the record as last read."""
        return Snapshot(self.files, self._running(self.beginning(), self.record))

    def staged_actions(self) -> list[apb.ActionDef]:
        """The actions added so far, then the annotations as one ``TRANSACTION_INFO``."""
        return self.view().actions()

    # --- statements ---------------------------------------------------------------------

    def statement(self) -> Transaction:
        """A transaction that reads this one's running view and whose commit adds its
        changes here (no version is made): ``with dtx.statement() as txn: ...``.

        Raises:
            NoSuchTransactionError: It was committed or aborted.
            TransactionExpiredError: It expired.
            CatalogError: It is being committed or aborted.
        """
        self.refresh()
        self.check_open()
        if self.record.isolation_level != pb.SNAPSHOT:
            raise InvalidArgumentError(
                f"distributed transaction {self.id!r} is SERIALIZABLE: it takes no "
                "statements, since its record has no place for their reads; resume it "
                "(versions.resume_transaction) to finish it in one process")
        base = self._view()  # the record was just read
        return Transaction(self.files, base, pb.SNAPSHOT, options=self._options,
                           lands=lambda change: self.add(base, change))

    def add(self, base: Snapshot, change: Change) -> Root:
        """Add ``change`` (made on ``base``: a running view, or the beginning version) to
        the transaction: on its newest running root, replacing the record only if it still
        holds what was read.

        Returns:
            The new running root.

        Raises:
            CommitConflict: A statement added since ``base`` touched what ``change`` does
                (try the statement again), or other statements kept winning the record's
                race for the commit timeout.
            OlympiaError: The statements added since ``base`` fail ``change``'s check
                (:attr:`Change.check`): what the check raised; nothing was added.
            InvalidArgumentError: ``change`` holds catalog-level changes.
            NoSuchTransactionError, TransactionExpiredError, CatalogError: The
                transaction is gone, expired, or being committed or aborted.
        """
        recorded = check_distributable(change)
        external = list(change.external_writes)  # written once the checks passed
        deadline = now_millis() + int(self._options.timeout_s * 1000)
        while True:
            read = read_record(self.files, self.id)
            self.check_open(read.record)
            if read.record.running_root_node_file_path != base.root.path:
                base = self._rebase(base, change, read.record)
            self.storage.map(lambda write: write(), external)  # before a tree names them
            external = []
            root = self._replace(read, base, recorded, change)
            if root is not None:
                return root
            if now_millis() > deadline:
                raise CommitConflict(f"distributed transaction {self.id!r}: other statements "
                                     "kept replacing its record; try again")

    def _rebase(self, base: Snapshot, change: Change,
                record: pb.DistributedTransactionDef) -> Snapshot:
        """The running view of ``record``, if the statements added since ``base`` do not
        touch what ``change`` does and meet its check (called once, with ``base`` and that
        view)."""
        newer = Snapshot(self.files, self._running(base, record))
        ours, theirs = _objects(self._staged(base)), _objects(newer.actions())
        same = [a.SerializeToString(deterministic=True) for a in theirs[:len(ours)]] == [
            a.SerializeToString(deterministic=True) for a in ours]
        clash = find_conflict(list(change.actions), theirs[len(ours):] if same else theirs)
        if clash is not None:
            raise CommitConflict(
                f"commit conflict on {clash[2]}: another statement changed it in distributed "
                f"transaction {self.id!r} meanwhile; try again")
        if change.check is not None:
            change.check(base, newer)
        return newer

    def _replace(self, read: _Read, base: Snapshot, recorded: list[apb.ActionDef],
                 change: Change) -> Root | None:
        """Write the running tree of ``change`` on ``base``, then swap the record to it:
        the new running root, or None if another writer replaced the record first."""
        path, running, files = _running_tree(base, self._staged(base), recorded, change,
                                             read.record.beginning_root_node_file_path)
        self.storage.write_many(files)
        record = pb.DistributedTransactionDef()
        record.CopyFrom(read.record)
        record.running_root_node_file_path = path
        if not self._swap(read, record):
            return None
        return Root(base.version, path, running, base.catalog_def)

    def _staged(self, base: Snapshot) -> list[apb.ActionDef]:
        """The transaction's actions in ``base``: none in the beginning version."""
        if base.root.path == self.record.beginning_root_node_file_path:
            return []
        return base.actions()

    def _swap(self, read: _Read, record: pb.DistributedTransactionDef) -> bool:
        raw = record.SerializeToString(deterministic=True)
        if not self.storage.replace(self.path, raw, read.raw):
            return False
        self._read = _Read(record, raw)
        return True

    # --- commit and abort ---------------------------------------------------------------

    def commit(self) -> int:
        """Land everything added as ONE version (through the normal protocol, its
        conflicts checked against every version since the beginning, and the catalog
        object's rules: :data:`Requirement`) and delete the record. Committing a
        transaction someone else is committing finishes it (a record found landed is not
        checked again).

        Returns:
            The version (the beginning version if nothing was added).

        Raises:
            NoSuchTransactionError: It was committed or aborted (or never began).
            TransactionExpiredError: It expired before it landed.
            CommitConflict: A version since the beginning conflicts with it; nothing of it
                landed and it is aborted.
            OlympiaError: A version since the beginning fails a rule's check (say,
                ``LocationInUseError``): what the check raised; nothing of it landed and it
                is aborted.
            CatalogError: It is being aborted.
            CommitOutcomeUnknown, TransientStorageError: Whether it landed is unknown:
                commit again to finish it.
        """
        while True:
            read = read_record(self.files, self.id)
            record = read.record
            if record.state == pb.ABORTING:
                raise CatalogError(f"distributed transaction {self.id!r} is being aborted")
            if record.state == pb.COMMITTING:
                return self._finish(record)
            self._check_alive(record)
            self._check_time(record)
            self._read = read
            if self.seal():
                return self._land(self.record)

    def seal(self) -> bool:
        """Mark the record as last read COMMITTING (it then takes no statement); False if
        it was replaced since it was read."""
        sealed = pb.DistributedTransactionDef()
        sealed.CopyFrom(self.record)
        sealed.state = pb.COMMITTING
        return self._swap(self._read, sealed)

    def _finish(self, record: pb.DistributedTransactionDef) -> int:
        """Finish a sealed record: find the version it landed, or land it."""
        landed = self._landed(record)
        if landed is not None:
            self.storage.delete(self.path)
            return landed
        return self._land(record)

    def landing(self, record: pb.DistributedTransactionDef) -> Transaction:
        """A transaction on the beginning version holding everything ``record`` staged,
        annotated with the transaction's id and instance, under this object's rules
        (:data:`Requirement`); it refuses to commit once ``record`` expired."""
        beginning = self.beginning(record)
        running = self._running(beginning, record)
        pending = {key: new for key, _old, new in
                   btree.diff(beginning.nodes, beginning.root.node, running.node)}
        txn = Transaction(self.files, beginning, record.isolation_level,
                          on_commit=self._on_commit, options=self._options)
        txn.restore_staged(pending, Snapshot(self.files, running).actions())
        txn.annotate(**{TRANSACTION_ID: record.id, TRANSACTION_INSTANCE: record.instance})
        txn.before_commit.append(lambda _t: self._check_landable(record))
        for requirement in self._requirements:
            requirement(txn)
        return txn

    def _land(self, record: pb.DistributedTransactionDef) -> int:
        txn = self.landing(record)
        try:
            version = txn.commit()
        except OlympiaError as exc:
            if not isinstance(exc, CommitConflict) and exc is not txn.refusal:
                raise
            landed = self._landed(record)
            if landed is None:
                self.storage.delete(self.path)
                if exc is txn.refusal:  # the rule's own error, saying what became of it
                    exc.args = (f"distributed transaction {self.id!r} cannot commit and was "
                                f"aborted: {exc}", *exc.args[1:])
                    raise
                raise CommitConflict(f"distributed transaction {self.id!r} cannot commit and "
                                     f"was aborted: {exc}") from None
            version = landed
        self.storage.delete(self.path)
        return version

    def _landed(self, record: pb.DistributedTransactionDef) -> int | None:
        """The version since the beginning that carries ``record``'s instance, if any (of
        those kept: the expiry job keeps every version since a live record's beginning)."""
        latest = self.files.discover_latest()
        first = max(record.beginning_version + 1, self.files.oldest_version())
        for version in range(first, latest.version + 1):
            snap = Snapshot(self.files, self.files.read_root(version))
            if any(a.type == A.TRANSACTION_INFO
                   and a.info.get(TRANSACTION_INSTANCE) == record.instance
                   for a in snap.actions()):
                return version
        return None

    def abort(self) -> pb.DistributedTransactionDef:
        """Discard everything added: nothing of it ever becomes visible (the files it
        wrote are left to the expiry job). A sealed record (its committer died) is aborted
        once it expired and nothing of it landed: a commit starts only with its whole time
        budget before the expiry (:data:`LANDING_MARGIN_MS`), so none can land it any more.

        Returns:
            The record as aborted (its running root names everything it discarded).

        Raises:
            NoSuchTransactionError: It was committed or aborted (or never began).
            CatalogError: It is being committed: commit it to finish.
        """
        while True:
            read = read_record(self.files, self.id)
            if read.record.state == pb.COMMITTING:
                landed = self._landed(read.record)
                if landed is not None or now_millis() <= read.record.expire_at_millis:
                    raise CatalogError(
                        f"distributed transaction {self.id!r} is being committed"
                        + (f" (it landed as version {landed})" if landed is not None else "")
                        + "; commit it again to finish")
                # sealed, then left past its expiry: no commit can land it any more
            if read.record.state == pb.OPEN:
                aborting = pb.DistributedTransactionDef()
                aborting.CopyFrom(read.record)
                aborting.state = pb.ABORTING
                if not self._swap(read, aborting):
                    continue
            self.storage.delete(self.path)
            return self.record if read.record.state == pb.OPEN else read.record


def read_record(files: CatalogFiles, txn_id: str) -> _Read:
    """The record of transaction ``txn_id``.

    Raises:
        NoSuchTransactionError: There is none (committed, aborted, expired and removed, or
            never begun).
        CorruptFileError: It cannot be parsed.
    """
    path = dtxn_path(txn_id)
    try:
        raw = files.storage.read(path)
    except FileNotFound:
        raise NoSuchTransactionError(f"no distributed transaction {txn_id!r} (it may have "
                                     "been committed, aborted or expired)") from None
    return _Read(parse_def(raw, files.storage.display(path), pb.DistributedTransactionDef), raw)


def begin(files: CatalogFiles, base: Snapshot, options: CommitOptions,
          on_commit: Callable[[Root], None] | None = None,
          requirements: Sequence[Requirement] = (), *, txn_id: str | None = None,
          isolation: int = pb.SNAPSHOT, ttl_millis: int | None = None,
          info: Mapping[str, str] | None = None,
          change: Change | None = None) -> DistributedTransaction:
    """Write the record of a new transaction on ``base``: its running root holds
    ``change`` (a first statement, made on ``base``; default none) and ``info`` as its
    annotations; ``requirements``: the rules its landing meets (:data:`Requirement`).

    Raises:
        AlreadyExistsError: A transaction ``txn_id`` exists.
        InvalidArgumentError: ``ttl_millis`` is not positive.
        InvalidNameError: ``txn_id`` is not a valid id.
    """
    txn_id = check_transaction_id(txn_id) if txn_id is not None else str(uuid.uuid4())
    ttl = base.catalog_def.txn_ttl_millis if ttl_millis is None else ttl_millis
    if ttl <= 0:
        raise InvalidArgumentError(f"a transaction's TTL must be positive, got {ttl} ms")
    added = [actions.make(A.TRANSACTION_INFO, None, info=dict(info))] if info else []
    if change is not None:
        added = [*check_distributable(change), *added]
    path, running, written = _running_tree(base, [], added, change, base.root.path)
    created = running.created_at_millis
    record = pb.DistributedTransactionDef(
        id=txn_id, isolation_level=isolation,  # type: ignore[arg-type]
        beginning_root_node_file_path=base.root.path, running_root_node_file_path=path,
        began_at_millis=created, expire_at_millis=created + ttl,
        beginning_version=base.version, instance=str(uuid.uuid4()), state=pb.OPEN)
    raw = record.SerializeToString(deterministic=True)
    try:
        files.storage.publish(written, dtxn_path(txn_id), raw,
                              alongside=change.external_writes if change else ())
    except FileAlreadyExists:
        raise AlreadyExistsError(f"a distributed transaction {txn_id!r} exists; commit or "
                                 "abort it, or choose another id") from None
    return DistributedTransaction(files, _Read(record, raw), options, on_commit, requirements)


def _running_tree(base: Snapshot, before: list[apb.ActionDef], added: list[apb.ActionDef],
                  change: Change | None, beginning: str) -> tuple[str, Node, dict[str, bytes]]:
    """A running root on ``base`` holding ``change``, its action rows ``before`` then
    ``added`` (:func:`_merged`): its path, the node, and every file to write (the change's
    definitions, the changed nodes, the root)."""
    created = now_millis()
    flushed = apply_changes(base, base.root.node, change.pending if change else {}, created)
    rows = _merged(before, added)
    running = Node(flushed.keys, flushed.values, flushed.children, created,
                   catalog_def=base.root.node.catalog_def, previous_root=beginning,
                   actions=tuple(actions.encode_row(base.codec, a) for a in rows))
    path = btree.new_node_path()
    order = base.catalog_def.order
    written = {**(change.new_defs if change else {}),
               **btree.encode_files(flushed.files, order), path: encode_node(running, order)}
    return path, running, written


def _objects(recorded: list[apb.ActionDef]) -> list[apb.ActionDef]:
    """The object actions of a running root (annotations left out)."""
    return [a for a in recorded if a.type != A.TRANSACTION_INFO]


def _merged(before: list[apb.ActionDef], added: list[apb.ActionDef]) -> list[apb.ActionDef]:
    """The action rows of a running root: the object actions of ``before`` then of
    ``added``, then every annotation of both as one ``TRANSACTION_INFO`` (later wins)."""
    info: dict[str, str] = {}
    rows = []
    for action in [*before, *added]:
        if action.type == A.TRANSACTION_INFO:
            info.update(action.info)
        else:
            rows.append(action)
    if info:
        rows.append(actions.make(A.TRANSACTION_INFO, None, info=info))
    return rows
