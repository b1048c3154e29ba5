"""Distributed transactions: save a running transaction, resume it in another process.

Saving writes the transaction's new definition files and its running tree (changed nodes
plus a running root stored under ``node/`` whose action rows are the pending actions and
annotations, as a commit records them), then ``dtxn/<id>.binpb`` exclusively. Resuming diffs
the beginning tree against the running tree to recover the staged changes, so the resumed
transaction commits through the normal protocol (conflicts are checked against everything
committed since it began). The dtxn file is removed when the resumed transaction commits or
aborts; a transaction past its ``expire_at_millis`` can be neither resumed nor committed.

The format has no place for a read set, so a SERIALIZABLE transaction can be saved only
before its first read; reads made after resuming are tracked and checked as usual.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import unquote

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.commit import apply_changes, now_millis
from olympia.catalog.files import parse_def
from olympia.catalog.keys import dtxn_path, path_version
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import (
    CorruptFileError,
    FileNotFound,
    InvalidArgumentError,
    NoSuchTransactionError,
    TransactionExpiredError,
)
from olympia.tree import btree
from olympia.tree.node import Node, decode_node, encode_node
from olympia.versions.history import VersionInfo
from olympia.versions.timetravel import format_millis

NOT_DISTRIBUTABLE = {A.CATALOG_ROLLBACK, A.CATALOG_EXPORT, A.CATALOG_ALTER}


def save_transaction(txn: Transaction) -> str:
    """Persist ``txn`` for another process and return its id; ``txn`` is closed here."""
    pending, recorded, new_defs = txn.staged()
    if any(a.type in NOT_DISTRIBUTABLE for a in recorded):
        raise InvalidArgumentError("catalog-level changes (rollback, export) cannot be "
                                   "distributed; commit them directly")
    if txn.has_reads:
        raise InvalidArgumentError(
            "a SERIALIZABLE transaction that has read the catalog cannot be saved: the "
            "format has no place for its read set, so the resumed transaction could not "
            "check it; commit it directly, save it before its first read, or use SNAPSHOT "
            "isolation")
    base = txn.base
    order = base.catalog_def.order
    created = now_millis()
    flushed = apply_changes(base, base.root.node, pending, created)
    running = Node(flushed.keys, flushed.values, flushed.children, created,
                   catalog_def=base.root.node.catalog_def, previous_root=base.root.path,
                   actions=tuple(actions.encode_row(base.codec, a) for a in recorded))
    running_path = btree.new_node_path()
    storage = txn.files.storage
    files = {**new_defs, **btree.encode_files(flushed.files, order),
             running_path: encode_node(running, order)}
    txn_id = str(uuid.uuid4())
    record = pb.DistributedTransactionDef(
        id=txn_id, isolation_level=txn.isolation,  # type: ignore[arg-type]
        beginning_root_node_file_path=base.root.path,
        running_root_node_file_path=running_path, began_at_millis=created,
        expire_at_millis=created + base.catalog_def.txn_ttl_millis,
        beginning_version=base.version)
    storage.publish(files, dtxn_path(txn_id), record.SerializeToString(deterministic=True))
    txn.mark_saved()
    return txn_id


def load_transaction(catalog: Catalog, txn_id: str) -> pb.DistributedTransactionDef:
    path = dtxn_path(txn_id)
    try:
        data = catalog.storage.read(path)
    except FileNotFound:
        raise NoSuchTransactionError(f"no distributed transaction {txn_id!r} (it may have been "
                            "committed, aborted or expired)") from None
    return parse_def(data, catalog.storage.display(path), pb.DistributedTransactionDef)


def _check_alive(record: pb.DistributedTransactionDef) -> None:
    if now_millis() > record.expire_at_millis:
        raise TransactionExpiredError(
            f"distributed transaction {record.id} expired at {record.expire_at_millis} "
            "(epoch ms); start a new transaction")


def _running(catalog: Catalog, record: pb.DistributedTransactionDef,
             ) -> tuple[Snapshot, Node, list[apb.ActionDef]]:
    """A saved transaction's beginning version, running root and pending actions."""
    version = path_version(record.beginning_root_node_file_path)
    if version is None:
        raise CorruptFileError(catalog.storage.display(dtxn_path(record.id)),
                               "beginning root is not a vn/ path")
    base = Snapshot(catalog.files, catalog.files.read_root(version))
    where = catalog.storage.display(record.running_root_node_file_path)
    running = decode_node(catalog.storage.read(record.running_root_node_file_path), where,
                          base.catalog_def.order, root=True)
    return base, running, [actions.decode_row(value, where) for _, value in running.actions]


def resume_transaction(catalog: Catalog, txn_id: str) -> Transaction:
    """Reopen a saved transaction; add to it, then commit or abort it as usual."""
    record = load_transaction(catalog, txn_id)
    _check_alive(record)
    base, running, recorded = _running(catalog, record)
    pending = {key: new for key, _old, new in btree.diff(base.nodes, base.root.node, running)}
    txn = catalog.transaction(record.isolation_level, base=base)
    txn.restore_staged(pending, recorded)
    txn.before_commit.append(lambda _t: _check_alive(record))

    def cleanup(t: Transaction) -> None:
        if t.state in ("committed", "aborted"):
            catalog.storage.delete(dtxn_path(txn_id))

    txn.after_end.append(cleanup)
    return txn


def transaction_dict(record: pb.DistributedTransactionDef) -> dict[str, Any]:
    """A saved transaction's record as ``olympia txn`` prints it."""
    return {
        "id": record.id,
        "isolation": pb.IsolationLevel.Name(record.isolation_level),
        "beginning_version": path_version(record.beginning_root_node_file_path),
        "beginning_root": record.beginning_root_node_file_path,
        "running_root": record.running_root_node_file_path,
        "began_at_millis": record.began_at_millis,
        "began_at": format_millis(record.began_at_millis),
        "expire_at_millis": record.expire_at_millis,
        "expires_at": format_millis(record.expire_at_millis),
        "expired": now_millis() > record.expire_at_millis,
    }


def describe_transaction(catalog: Catalog, txn_id: str) -> dict[str, Any]:
    """A saved transaction's record plus what it would commit: annotations and actions."""
    record = load_transaction(catalog, txn_id)
    _base, _running_root, recorded = _running(catalog, record)
    # formatted as ``olympia log`` formats a version's annotations and actions
    pending = VersionInfo(0, record.began_at_millis, tuple(recorded)).to_dict()
    return {**transaction_dict(record), "info": pending["info"], "actions": pending["actions"]}


def abort_transaction(catalog: Catalog, txn_id: str) -> None:
    """Discard a saved transaction (its files become orphans for the expiry job)."""
    load_transaction(catalog, txn_id)
    catalog.storage.delete(dtxn_path(txn_id))


def list_transactions(catalog: Catalog) -> list[pb.DistributedTransactionDef]:
    """Every saved distributed transaction, oldest first."""
    ids = [f.path.removeprefix("dtxn/").removesuffix(".binpb")
           for f in catalog.storage.list("dtxn/") if f.path.endswith(".binpb")]
    records = []
    for txn_id in ids:
        try:
            records.append(load_transaction(catalog, unquote(txn_id)))
        except NoSuchTransactionError:
            continue  # committed or aborted since the listing
    return sorted(records, key=lambda r: r.began_at_millis)
