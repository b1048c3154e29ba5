"""Shared benchmark helpers: timing, storage-operation counts, catalogs, the S3 server and
the cloud emulators."""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from olympia import Catalog
from olympia.catalog.files import LATEST, OLDEST
from olympia.catalog.keys import path_version
from olympia.storage import Backend, FileInfo, Storage
from olympia.storage.backends import Job, RunAll, run_in_turn

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [{"name": "id", "type": "int8", "nullable": False}, {"name": "payload", "type": "json"},
           {"name": "tags", "type": "list", "element": {"type": "varchar"}}]


def percentiles(samples: list[float]) -> dict[str, float]:
    """Median and p95 in milliseconds."""
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3)}


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def per_second(count: int, seconds: float) -> float:
    return round(count / max(seconds, 1e-6), 1)


@contextlib.contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """``with stopwatch() as t: ...`` then ``t["seconds"]``."""
    out: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = round(time.perf_counter() - start, 3)


def guarded(fn: Callable[[], Any]) -> Any:
    """``fn()``, or an error entry: one failing measurement must not lose the others."""
    try:
        return fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}


def ops(storage: Storage, fn: Callable[[], Any]) -> dict[str, int]:
    """Storage operations done by ``fn``."""
    storage.stats.reset()
    fn()
    return storage.stats.snapshot()


def build_catalog(uri: str, options: dict[str, Any], objects: int, batch: int = 5000,
                  order: int = 128, namespaces: int = 10) -> Catalog:
    """A catalog holding ``objects`` objects (namespaces + tables), built in big transactions."""
    catalog = Catalog.create(uri, options, order=order)
    with catalog.transaction() as txn:
        for n in range(namespaces):
            txn.create_namespace(f"ns{n:02d}")
    made = namespaces
    while made < objects:
        with catalog.transaction() as txn:
            for i in range(made, min(objects, made + batch)):
                txn.create_table(f"ns{i % namespaces:02d}", f"t{i:07d}", columns=COLUMNS)
        made = min(objects, made + batch)
    return catalog


def table_name(i: int, namespaces: int = 10) -> tuple[str, str]:
    return f"ns{i % namespaces:02d}", f"t{i:07d}"


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="olympia-bench-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def s3_location(name: str, latency_s: float = 0.0) -> Iterator[tuple[str, dict[str, Any]]]:
    """A prefix on a real SeaweedFS S3 server started for this benchmark; with
    ``latency_s``, reached through a relay that delays every request by that much (the
    round trip to a real S3 region, where the server does not share this machine's CPU)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from s3server import FaultProxy, SeaweedS3Server

    with SeaweedS3Server() as server:
        uri = f"s3://{server.bucket}/{name}"
        options = dict(server.storage_options)
        if not latency_s:
            yield uri, options
            return
        with FaultProxy(server.endpoint_url) as relay:
            relay.delay_s = latency_s
            yield uri, relay.storage_options(options)


@contextlib.contextmanager
def cloud_location(scheme: str, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A prefix on a server of a cloud ``scheme`` started on this machine for this
    benchmark: s3 on SeaweedFS (:func:`s3_location`), gs on fake-gcs-server, abfs on
    Azurite (the emulators the tests use, which ``make install`` installs).

    Raises:
        RuntimeError: The emulator is not installed.
    """
    if scheme == "s3":
        with s3_location(name) as found:
            yield found
        return
    sys.path.insert(0, str(ROOT / "tests"))
    import emulators

    kind = {"gs": emulators.FakeGcsServer, "abfs": emulators.Azurite}[scheme]
    if not kind.available():
        raise RuntimeError(f"{kind.name} is not installed (make install installs it)")
    with kind() as server:
        if isinstance(server, emulators.FakeGcsServer):
            emulators.create_gcs_bucket(server, "bench")
            options = emulators.gcs_storage_options(server)
        else:
            emulators.create_azure_container(server, "bench")
            options = emulators.azure_storage_options(server)
        yield f"{scheme}://bench/{name}", dict(options)


def file_kind(path: str) -> str:
    """root, hint, node, def or other, for a catalog-relative path."""
    if path_version(path) is not None:
        return "root"
    if path in (LATEST, OLDEST):
        return "hint"
    return path.split("/", 1)[0] if path.startswith(("node/", "def/")) else "other"


class OpLog:
    """Storage operations counted by (operation, kind of file), and each one in order."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.calls: list[tuple[str, str]] = []  # (operation, catalog-relative path)

    def note(self, op: str, path: str) -> None:
        self.counts[op, file_kind(path)] += 1
        self.calls.append((op, path))

    def count(self, op: str, kind: str | None = None) -> int:
        return sum(n for (o, k), n in self.counts.items() if o == op and kind in (None, k))


class _RecordingBackend(Backend):
    """Forwards every call to the real backend and notes it in an :class:`OpLog`."""

    def __init__(self, inner: Backend, root: str, log: OpLog) -> None:
        self.inner, self.root, self.log = inner, root, log
        self.remote = inner.remote

    def _note(self, op: str, path: str) -> None:
        self.log.note(op, path.removeprefix(self.root))

    def read(self, path: str) -> bytes:
        self._note("read", path)  # a miss is a round trip too
        return self.inner.read(path)

    def read_if_changed(self, path: str, tag: str) -> tuple[bytes | None, str]:
        self._note("read", path)  # a round trip whether or not a body comes back
        return self.inner.read_if_changed(path, tag)

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self._note("write", path)
        self.inner.write(path, data, durable)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self._note("create_exclusive", path)
        self.inner.create_exclusive(path, data)

    def publish(self, files: Mapping[str, bytes], path: str, data: bytes,
                run_all: RunAll = run_in_turn, present: Sequence[str] = (),
                unchanged: Mapping[str, str] | None = None, alongside: Sequence[Job] = (),
                ) -> None:
        for name in files:
            self._note("write", name)
        for name in present:
            self._note("exists", name)
        for name in unchanged or {}:
            self._note("read", name)
        self._note("create_exclusive", path)
        self.inner.publish(files, path, data, run_all, present, unchanged, alongside)

    def replace(self, path: str, data: bytes, expected: bytes) -> None:
        self._note("replace", path)
        self.inner.replace(path, data, expected)

    def exists(self, path: str) -> bool:
        self._note("exists", path)
        return self.inner.exists(path)

    def list(self, prefix: str) -> list[FileInfo]:
        self._note("list", prefix)
        return self.inner.list(prefix)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        for path in paths:
            self._note("delete", path)
        return self.inner.delete_many(paths)

    def place(self, root: str) -> Hashable:
        return self.inner.place(root)


@contextlib.contextmanager
def recording(storage: Storage) -> Iterator[OpLog]:
    """Count, by kind of file, every operation ``storage`` makes inside the block."""
    log = OpLog()
    inner = storage.backend
    storage.backend = _RecordingBackend(inner, storage.root, log)
    try:
        yield log
    finally:
        storage.backend = inner
