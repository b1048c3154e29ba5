"""The Iceberg files of expired distributed transactions, removed by an expiry run.

A transaction expired past the grace period can no longer land (a commit checks the expiry
time before its root, and the grace period absorbs clock skew and commits in flight), so
the files its statements wrote under the tables' locations are garbage once no kept
version names them: :func:`olympia.iceberg.txnfiles.remove_files` finds and deletes them.
The run does this before it deletes the record, the only thing that leads to them: a run
that stops in between leaves the record, and the next run does it again (a file already
gone counts as deleted).
"""

from __future__ import annotations

from olympia.catalog.catalog import Catalog
from olympia.exceptions import NoSuchTransactionError
from olympia.expire.reachability import TxnRoots


def remove_expired(catalog: Catalog, dead: list[TxnRoots], oldest: int,
                   ) -> tuple[dict[str, int], list[str]]:
    """Delete the Iceberg files of the expired transactions ``dead`` that no version kept
    names (neither by the catalog's settings nor from ``oldest`` on).

    Args:
        catalog: The catalog.
        dead: Transactions past their expiry time plus the grace period.
        oldest: The oldest version the run keeps.

    Returns:
        Transaction id -> how many files were deleted; warnings (files left, and why).
    """
    if not dead:
        return {}, []
    try:
        from olympia.iceberg.catalog import OlympiaCatalog
        from olympia.iceberg.txnfiles import remove_files
    except ModuleNotFoundError as exc:
        from olympia.iceberg import lacks_pyiceberg

        if not lacks_pyiceberg(exc):
            raise
        return {}, [f"pyiceberg is not installed: the Iceberg files of expired transactions "
                    f"{', '.join(sorted(t.id for t in dead))} (if any) were left"]
    ice = OlympiaCatalog.over(catalog)
    deleted: dict[str, int] = {}
    warnings: list[str] = []
    for txn in dead:
        try:
            dtx = catalog.distributed_transaction(txn.id)
        except NoSuchTransactionError:
            continue  # removed meanwhile (by an abort, or another run)
        removed = remove_files(ice, dtx, dtx.record, oldest)
        if removed.count:
            deleted[txn.id] = removed.count
        warnings.extend(f"expired transaction {txn.id}: {m}" for m in removed.left)
    return deleted, warnings
