"""A bounded, thread-safe LRU cache: the one used wherever parsed files, opened clients or
encoded answers are kept in memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``size`` entries; putting one more drops the least recently used (read or
    put) and hands it to ``on_evict``. Every method may be called from any thread."""

    def __init__(self, size: int, on_evict: Callable[[V], object] | None = None) -> None:
        self.size = size
        self._on_evict = on_evict
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def get_many(self, keys: list[K]) -> list[V | None]:
        """:meth:`get` of each key, under one hold of the lock."""
        with self._lock:
            values = list(map(self._entries.get, keys))
            move_to_end = self._entries.move_to_end
            for key, value in zip(keys, values, strict=True):
                if value is not None:
                    move_to_end(key)
            return values

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` as the most recently used entry."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            dropped = [self._entries.popitem(last=False)[1]
                       for _ in range(len(self._entries) - self.size)]
        if self._on_evict is not None:
            for old in dropped:
                self._on_evict(old)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
