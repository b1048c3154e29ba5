"""Catalog versions: time travel, history and diff, rollback, snapshot export, distributed
transactions, and which versions the retention policy keeps (:mod:`olympia.versions.policy`)."""

from olympia.versions.dtxn import (
    abort_transaction,
    list_transactions,
    resume_transaction,
    save_transaction,
)
from olympia.versions.export import ExportResult, export
from olympia.versions.history import (
    Diff,
    HistoryPage,
    VersionInfo,
    diff,
    history,
    search_history,
)
from olympia.versions.rollback import rollback
from olympia.versions.timetravel import at_export, at_timestamp, at_version, resolve

__all__ = [
    "Diff", "ExportResult", "HistoryPage", "VersionInfo", "abort_transaction", "at_export",
    "at_timestamp", "at_version", "diff", "export", "history", "list_transactions", "resolve",
    "resume_transaction", "rollback", "save_transaction", "search_history",
]
