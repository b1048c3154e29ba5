"""The ``memory`` scheme: an in-process store (tests, examples)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any
from urllib.parse import urlsplit

from olympia.storage.backends import (
    Backend,
    FileInfo,
    Opened,
    no_options,
    no_properties,
    passthrough,
)
from olympia.storage.retry import StorageSettings


class MemoryBackend(Backend):
    """An in-process store, shared by every Storage opened on the same ``memory://name``;
    so is the lock that makes exclusive creates exclusive."""

    _stores: dict[str, dict[str, tuple[bytes, float]]] = {}
    _locks: dict[str, threading.Lock] = {}
    _registry_lock = threading.Lock()

    def __init__(self, name: str) -> None:
        with self._registry_lock:
            self.files = self._stores.setdefault(name, {})
            self.lock = self._locks.setdefault(name, threading.Lock())

    def read(self, path: str) -> bytes:
        try:
            return self.files[path][0]
        except KeyError:
            raise FileNotFoundError(path) from None

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.files[path] = (bytes(data), time.time())

    def create_exclusive(self, path: str, data: bytes) -> None:
        with self.lock:
            if path in self.files:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        with self.lock:
            if self.read(path) != expected:
                raise FileExistsError(path)
            self.files[path] = (bytes(data), time.time())

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        """The tag is the SHA-256 of the content (reading it is free)."""
        data = self.read(path)
        now = hashlib.sha256(data).hexdigest()
        return (None, tag) if now == tag else (data, now)

    def exists(self, path: str) -> bool:
        return path in self.files

    def list(self, prefix: str) -> list[FileInfo]:
        items = list(self.files.items())
        return [FileInfo(p, len(d), m) for p, (d, m) in items if p.startswith(prefix)]

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            self.files.pop(path, None)
        return {}

    def place(self, root: str) -> Hashable:
        return "memory", id(self.files), root


def open_backend(uri: str, options: dict[str, Any], settings: StorageSettings) -> Opened:
    parts = urlsplit(uri)
    return "/", MemoryBackend((parts.netloc + parts.path).strip("/")), None


storage_options = no_options  # no pyiceberg property configures it
iceberg_properties = no_properties  # its tables need no FileIO property
data_source_properties = passthrough

# Login and Password: the S3 names, as before (the store ignores them)
CONNECTION = ("key", "secret")
