"""Distributed transactions: save a running transaction, resume it in another process.

Saving writes the transaction's new definition files and its running tree (changed nodes
plus a running root stored under ``node/`` whose action rows are the pending actions), then
``dtxn/<id>.binpb`` exclusively. Resuming diffs the beginning tree against the running tree
to recover the staged changes, so the resumed transaction commits through the normal
protocol (conflicts are checked against everything committed since it began). The dtxn file
is removed when the resumed transaction commits or aborts; a transaction past its
``expire_at_millis`` can be neither resumed nor committed.
"""

from __future__ import annotations

import uuid
from urllib.parse import unquote

from google.protobuf.message import DecodeError

from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import dtxn_path, path_version
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction, now_millis
from olympia.exceptions import (
    CorruptFileError,
    FileNotFound,
    InvalidArgumentError,
    NotFoundError,
    TransactionExpiredError,
)
from olympia.tree import btree
from olympia.tree.node import Node, decode_node, encode_node

NOT_DISTRIBUTABLE = {A.CATALOG_ROLLBACK, A.CATALOG_EXPORT, A.CATALOG_ALTER}


def save_transaction(txn: Transaction) -> str:
    """Persist ``txn`` for another process and return its id; ``txn`` is closed here."""
    pending, recorded, new_defs = txn.staged()
    if any(a.type in NOT_DISTRIBUTABLE for a in recorded):
        raise InvalidArgumentError("catalog-level changes (rollback, export) cannot be "
                                   "distributed; commit them directly")
    base = txn.base
    order = base.catalog_def.order
    writer = btree.TreeWriter(base.nodes, base.root.node)
    for key, value in sorted(pending.items()):
        if value is None:
            writer.delete(key)
        else:
            writer.put(key, value)
    created = now_millis()
    flushed = writer.flush(created)
    running = Node(flushed.keys, flushed.values, flushed.children, created,
                   catalog_def=base.root.node.catalog_def, previous_root=base.root.path,
                   actions=tuple(actions.encode_row(base.codec, a) for a in recorded))
    running_path = btree.new_node_path()
    storage = txn.files.storage
    files = {**new_defs, **btree.encode_files(flushed.files, order),
             running_path: encode_node(running, order)}
    storage.write_many(files)
    txn_id = str(uuid.uuid4())
    record = pb.DistributedTransactionDef(
        id=txn_id, isolation_level=txn.isolation,  # type: ignore[arg-type]
        beginning_root_node_file_path=base.root.path,
        running_root_node_file_path=running_path, began_at_millis=created,
        expire_at_millis=created + base.catalog_def.txn_ttl_millis,
        beginning_version=base.version)
    storage.create_exclusive(dtxn_path(txn_id), record.SerializeToString(deterministic=True))
    txn.mark_saved()
    return txn_id


def load_transaction(catalog: Catalog, txn_id: str) -> pb.DistributedTransactionDef:
    path = dtxn_path(txn_id)
    try:
        data = catalog.storage.read(path)
    except FileNotFound:
        raise NotFoundError(f"no distributed transaction {txn_id!r} (it may have been "
                            "committed, aborted or expired)") from None
    record = pb.DistributedTransactionDef()
    try:
        record.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(catalog.storage.display(path), str(exc)) from None
    return record


def _check_alive(record: pb.DistributedTransactionDef) -> None:
    if now_millis() > record.expire_at_millis:
        raise TransactionExpiredError(
            f"distributed transaction {record.id} expired at {record.expire_at_millis} "
            "(epoch ms); start a new transaction")


def resume_transaction(catalog: Catalog, txn_id: str) -> Transaction:
    """Reopen a saved transaction; add to it, then commit or abort it as usual."""
    record = load_transaction(catalog, txn_id)
    _check_alive(record)
    version = path_version(record.beginning_root_node_file_path)
    if version is None:
        raise CorruptFileError(catalog.storage.display(dtxn_path(txn_id)),
                               "beginning root is not a vn/ path")
    base = Snapshot(catalog.files, catalog.files.read_root(version))
    order = base.catalog_def.order
    running_path = record.running_root_node_file_path
    running = decode_node(catalog.storage.read(running_path),
                          catalog.storage.display(running_path), order, root=True)
    pending = {key: new for key, _old, new in btree.diff(base.nodes, base.root.node, running)}
    where = catalog.storage.display(running_path)
    recorded = [actions.decode_row(value, where) for _, value in running.actions]
    txn = Transaction(catalog, base, record.isolation_level)
    txn.restore_staged(pending, recorded)
    txn.before_commit.append(lambda _t: _check_alive(record))

    def cleanup(t: Transaction) -> None:
        if t.state in ("committed", "aborted"):
            catalog.storage.delete(dtxn_path(txn_id))

    txn.after_end.append(cleanup)
    return txn


def abort_transaction(catalog: Catalog, txn_id: str) -> None:
    """Discard a saved transaction (its files become orphans for the expiry job)."""
    load_transaction(catalog, txn_id)
    catalog.storage.delete(dtxn_path(txn_id))


def list_transactions(catalog: Catalog) -> list[pb.DistributedTransactionDef]:
    """Every saved distributed transaction, oldest first."""
    ids = [f.path.removeprefix("dtxn/").removesuffix(".binpb")
           for f in catalog.storage.list("dtxn/") if f.path.endswith(".binpb")]
    records = [load_transaction(catalog, unquote(i)) for i in ids]
    return sorted(records, key=lambda r: r.began_at_millis)
