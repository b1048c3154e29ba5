"""Distributed transactions across processes: hand a running transaction over (save), finish
one in another process (resume), list and describe the open ones. The transactions
themselves (records, statements, commit, abort) are :mod:`olympia.catalog.distributed`.

``save_transaction`` begins a distributed transaction on the handed-over transaction's base
and adds its staged changes as one statement. ``resume_transaction`` returns a transaction on
the beginning version holding everything added so far: add more, then commit it, which
seals the record first (so no statement can be added, and lost, meanwhile) and lands it
all as one version; aborting it aborts the distributed transaction.

The format has no place for a read set, so a SERIALIZABLE transaction can be saved only
before its first read; reads made after resuming are tracked and checked as usual.
"""

from __future__ import annotations

from typing import Any

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions, distributed
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.commit import CommitOptions
from olympia.catalog.distributed import read_record
from olympia.catalog.keys import ObjectRef, ObjectType, path_version
from olympia.catalog.transaction import Transaction, now_millis
from olympia.exceptions import (
    CommitConflict,
    InvalidArgumentError,
    NoSuchTransactionError,
    NoSuchVersionError,
)
from olympia.versions.history import VersionInfo
from olympia.versions.policy import MS, transaction_records
from olympia.versions.timetravel import format_millis


def save_transaction(txn: Transaction) -> str:
    """Persist ``txn`` for another process and return its id; ``txn`` is closed here.

    Raises:
        InvalidArgumentError: ``txn`` holds catalog-level changes, or is SERIALIZABLE and
            has read the catalog.
    """
    if txn.has_reads:
        raise InvalidArgumentError(
            "a SERIALIZABLE transaction that has read the catalog cannot be saved: the "
            "format has no place for its read set, so the resumed transaction could not "
            "check it; commit it directly, save it before its first read, or use SNAPSHOT "
            "isolation")
    change = txn.change()
    dtx = distributed.begin(txn.files, txn.base, CommitOptions(), isolation=txn.isolation,
                            change=change)
    txn.mark_saved()
    return dtx.id


def load_transaction(catalog: Catalog, txn_id: str) -> pb.DistributedTransactionDef:
    """The record of transaction ``txn_id``.

    Raises:
        NoSuchTransactionError: There is none.
    """
    return read_record(catalog.files, txn_id).record


def resume_transaction(catalog: Catalog, txn_id: str) -> Transaction:
    """Reopen a saved transaction in this process; add to it, then commit or abort it.

    Raises:
        NoSuchTransactionError: There is none.
        TransactionExpiredError: It expired.
        CatalogError: It is being committed or aborted.
    """
    dtx = catalog.distributed_transaction(txn_id)
    dtx.check_open()
    txn = dtx.landing(dtx.record)

    def seal(_t: Transaction) -> None:
        if not dtx.seal():
            raise CommitConflict(f"distributed transaction {txn_id!r} changed since it was "
                                 "resumed (a statement, a commit or an abort); resume it again")

    def cleanup(t: Transaction) -> None:
        if t.state == "committed" or dtx.record.state == pb.COMMITTING:
            catalog.storage.delete(dtx.path)  # landed, or sealed and cannot land
        else:
            dtx.abort()

    txn.before_commit.append(seal)
    txn.after_end.append(cleanup)
    return txn


def transaction_dict(record: pb.DistributedTransactionDef,
                     now_ms: int | None = None) -> dict[str, Any]:
    """A transaction's record as ``olympia txn`` prints it, with its age at ``now_ms``
    (default: now)."""
    now = now_millis() if now_ms is None else now_ms
    age = max(0, now - record.began_at_millis)
    return {
        "id": record.id,
        "state": distributed.STATES.get(record.state, "unknown"),
        "isolation": pb.IsolationLevel.Name(record.isolation_level),
        "beginning_version": path_version(record.beginning_root_node_file_path),
        "beginning_root": record.beginning_root_node_file_path,
        "running_root": record.running_root_node_file_path,
        "began_at_millis": record.began_at_millis,
        "began_at": format_millis(record.began_at_millis),
        "age_millis": age,
        "age": format_age(age),
        "expire_at_millis": record.expire_at_millis,
        "expires_at": format_millis(record.expire_at_millis),
        "expired": now > record.expire_at_millis,
    }


def format_age(ms: int) -> str:
    """A duration rounded down to its two largest units (``2h 5m``, ``45s``)."""
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        if ms >= MS[unit] or (unit == "s" and not parts):
            parts.append(f"{ms // MS[unit]}{unit}")
            ms %= MS[unit]
        elif parts:
            break
    return " ".join(parts[:2])


def touched_objects(staged: list[apb.ActionDef]) -> list[ObjectRef]:
    """The tables and views ``staged`` actions change (both names of a rename), in order."""
    found: dict[ObjectRef, None] = {}
    for action in staged:
        for ref in (actions.ref_of(action), actions.renamed_ref(action)):
            if ref is not None and ref.type in (ObjectType.TABLE, ObjectType.VIEW):
                found[ref] = None
    return list(found)


def touched(staged: list[apb.ActionDef]) -> dict[str, list[str]]:
    """The names of the tables and views ``staged`` actions change, sorted."""
    refs = touched_objects(staged)
    return {"tables": sorted(str(r) for r in refs if r.type == ObjectType.TABLE),
            "views": sorted(str(r) for r in refs if r.type == ObjectType.VIEW)}


def summarize_transaction(catalog: Catalog, txn_id: str,
                          now_ms: int | None = None) -> dict[str, Any]:
    """A transaction's record (:func:`transaction_dict`), who opened it (the ``user``
    annotation, ``olympia txn begin``'s; ``None`` if it has none), its annotations, and
    the tables and views it touched (``None`` when its beginning version expired and its
    running tree cannot be read).

    Raises:
        NoSuchTransactionError: There is none.
    """
    return _summary(catalog, txn_id, now_ms)[0]


def _summary(catalog: Catalog, txn_id: str, now_ms: int | None,
             ) -> tuple[dict[str, Any], list[apb.ActionDef] | None]:
    """:func:`summarize_transaction`, and the staged actions it read (``None``: none could
    be)."""
    dtx = catalog.distributed_transaction(txn_id)
    try:
        staged: list[apb.ActionDef] | None = dtx.staged_actions()
    except NoSuchVersionError:
        staged = None
    info = next((dict(a.info) for a in staged or () if a.type == A.TRANSACTION_INFO), {})
    names = touched(staged) if staged is not None else {"tables": None, "views": None}
    return {**transaction_dict(dtx.record, now_ms), "user": info.get("user"), "info": info,
            **names}, staged


def describe_transaction(catalog: Catalog, txn_id: str,
                         now_ms: int | None = None) -> dict[str, Any]:
    """:func:`summarize_transaction` plus what it would commit: its actions (as
    ``olympia log`` describes a version's; ``None`` when its beginning version expired).

    Raises:
        NoSuchTransactionError: There is none.
    """
    shown, staged = _summary(catalog, txn_id, now_ms)
    if staged is None:
        return {**shown, "actions": None}
    # formatted as ``olympia log`` formats a version's annotations and actions
    pending = VersionInfo(0, shown["began_at_millis"], tuple(staged)).to_dict()
    return {**shown, "actions": pending["actions"]}


def summarize_transactions(catalog: Catalog,
                           now_ms: int | None = None) -> list[dict[str, Any]]:
    """:func:`summarize_transaction` of every distributed transaction, oldest first."""
    summaries = []
    for record in list_transactions(catalog):
        try:
            summaries.append(summarize_transaction(catalog, record.id, now_ms))
        except NoSuchTransactionError:
            continue  # committed or aborted since the listing
    return summaries


def abort_transaction(catalog: Catalog, txn_id: str) -> None:
    """Discard a transaction (its catalog files become orphans for the expiry job; its
    Iceberg files stay: :func:`olympia.iceberg.txnfiles.abort_transaction` removes them).

    Raises:
        NoSuchTransactionError: There is none.
        CatalogError: It is being committed.
    """
    catalog.distributed_transaction(txn_id).abort()


def list_transactions(catalog: Catalog) -> list[pb.DistributedTransactionDef]:
    """Every distributed transaction's record, oldest first."""
    return sorted(transaction_records(catalog.files), key=lambda r: r.began_at_millis)
