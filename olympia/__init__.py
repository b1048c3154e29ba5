"""Olympia: a storage-only data catalog in the Olympia format."""

from olympia.catalog.catalog import Catalog
from olympia.catalog.objects import Column, Namespace, Table, View
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction

__all__ = ["Catalog", "Column", "Namespace", "Snapshot", "Table", "Transaction", "View"]
