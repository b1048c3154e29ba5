"""Counts of storage operations (:attr:`olympia.storage.Storage.stats`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


@dataclass
class StorageStats:
    """Counts of storage operations; stable where timings are not (used by benchmarks).

    Every operation issued counts, whatever its outcome: a read of an absent file is a
    round trip too. ``misses`` counts the reads that found no file, ``failures`` the
    operations that ended in any other error (after retries), ``retries`` the tries made
    again after a transient failure.
    """

    reads: int = 0
    writes: int = 0
    exists: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    misses: int = 0
    failures: int = 0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def reset(self) -> None:
        with self._lock:
            for f in fields(self):
                if not f.name.startswith("_"):
                    setattr(self, f.name, 0)
