"""Shared benchmark helpers: timing, storage-operation counts, catalogs, the S3 server."""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from olympia import Catalog
from olympia.storage import Storage

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
def s3_location(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A prefix on a real SeaweedFS S3 server started for this benchmark."""
    sys.path.insert(0, str(ROOT / "tests"))
    from s3server import SeaweedS3Server

    with SeaweedS3Server() as server:
        yield f"s3://{server.bucket}/{name}", dict(server.storage_options)
