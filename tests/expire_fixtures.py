"""Helpers shared by the expiry tests (tests/test_expire_*.py)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conftest import Location

from olympia import Catalog, versions
from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import dtxn_path
from olympia.catalog.transaction import now_millis
from olympia.exceptions import NotFoundError
from olympia.expire import ExpirePolicy
from olympia.expire.reachability import Clock
from olympia.tree import btree

COLS = [{"name": "id", "type": "int8"}]
GRACE_MS = 1000
ORPHAN = "node/00000000-0000-4000-8000-000000000000.arrow"
STRANGERS = ["node/notes.txt", "def/table/readme.binpb", "exports/x/vn/latest", "vn/lock",
             "node/0nested/vn/00000000000000000000000000000000"]


def state(reader: Any) -> Any:
    """Everything a version holds, comparable across reads."""
    return reader.load_all()


def build(location: Location, order: int = 3, tables: int = 12, alters: int = 4,
          ) -> tuple[Catalog, dict[int, Any]]:
    """A catalog with 2 + tables + alters versions and the state of each."""
    catalog = Catalog.create(location.uri, location.storage_options, order=order)
    catalog.create_namespace("s")
    for i in range(tables):
        catalog.create_table("s", f"t{i:02d}", columns=COLS)
    for i in range(alters):
        catalog.alter_table(f"s.t{i:02d}", set_properties={"v": str(i)})
    return catalog, {v: state(catalog.at_version(v)) for v in range(catalog.version + 1)}


def policy(**overrides: Any) -> ExpirePolicy:
    values: dict[str, Any] = {"keep_last": 4, "older_than_ms": 0, "grace_ms": GRACE_MS,
                              "force": True}
    values.update(overrides)
    return ExpirePolicy(**values)


def mark_old(catalog: Catalog) -> int:
    """An instant at which every file of ``catalog`` written so far is older than the grace
    period, by the storage's own timestamps (what expiry compares; S3 truncates them to
    whole seconds), once the clock has passed it: runs given it as ``now_ms`` then agree
    whether or not they are given a clock."""
    newest = max(f.modified for f in catalog.storage.list())
    instant = math.floor(newest * 1000) + GRACE_MS + 1
    while now_millis() < instant:  # a wait for a condition, not a guess at a duration
        time.sleep(0.05)
    return instant


def frozen(instant: int) -> Clock:
    """A clock that always reads ``instant`` (epoch milliseconds)."""
    return lambda: instant


def files(catalog: Catalog) -> set[str]:
    return {f.path for f in catalog.storage.list()}


def expire_dtxn(catalog: Catalog, txn_id: str) -> None:
    """Rewrite a saved transaction's record as expired long ago."""
    path = dtxn_path(txn_id)
    record = pb.DistributedTransactionDef()
    record.ParseFromString(catalog.storage.read(path))
    record.expire_at_millis = 1
    catalog.storage.write(path, record.SerializeToString())


def check_kept(location: Location, before: dict[int, Any], first: int) -> Catalog:
    """Every version from ``first`` on opens, validates and reads as before; older ones
    report that they expired."""
    fresh = Catalog.open(location.uri, location.storage_options)
    for v in range(first, fresh.version + 1):
        snap = fresh.at_version(v)
        btree.validate(snap.nodes, snap.root.node, snap.catalog_def.order)
        if v in before:
            assert state(snap) == before[v], f"version {v} changed"
    if first:
        try:
            fresh.at_version(first - 1)
        except NotFoundError as exc:
            assert "expired" in str(exc)
        else:
            raise AssertionError(f"version {first - 1} should have expired")
    return fresh


class StalledCommit:
    """A commit of table ``s.<name>`` that has written its node and definition files and
    waits before creating its root, until :meth:`land`."""

    def __init__(self, location: Location, name: str) -> None:
        catalog = Catalog.open(location.uri, location.storage_options)
        files_written, self._release = threading.Event(), threading.Event()
        publish = catalog.storage.publish

        def slow_root(files: dict[str, bytes], path: str, data: bytes,
                      present: Sequence[str] = (),
                      unchanged: Mapping[str, str] | None = None,
                      alongside: Sequence[Callable[[], object]] = ()) -> None:
            catalog.storage.write_many(files)
            files_written.set()
            assert self._release.wait(120)
            publish({}, path, data, present, unchanged, alongside)

        catalog.storage.publish = slow_root  # type: ignore[method-assign,assignment]
        self._thread = threading.Thread(
            target=lambda: catalog.create_table("s", name, columns=COLS))
        self._thread.start()
        assert files_written.wait(60)

    def land(self) -> None:
        """Let the root be created, and wait for the commit to finish."""
        self._release.set()
        self._thread.join(60)


def export_old(catalog: Catalog, location: Location, name: str, mode: str, version: int,
               ) -> None:
    versions.export(catalog, name, location.sub(f"exports/{name}").uri, mode,
                    target_storage_options=location.storage_options, version=version,
                    depth=1 if mode == "partial" else None)


@dataclass
class Scenario:
    """Everything a full expiry run must handle, set up in one catalog (see :func:`scenario`)."""

    catalog: Catalog
    before: dict[int, Any]
    old: int  # exported as "audit" (minimal); old + 1 as "snap" (partial)
    live_id: str  # a saved distributed transaction, still live
    saved_tree: set[str]  # the node files that saving it wrote
    dead_id: str  # a saved distributed transaction, expired
    young: str  # a node file of a commit in flight, younger than the grace period
    now: int  # an instant at which every other file is older than the grace period
    listed: set[str]  # every file before the run


def scenario(location: Location, order: int) -> Scenario:
    """Versions, two exports of expired versions, a live and an expired distributed
    transaction, an orphan, files the format does not name, and a young in-flight file."""
    catalog, before = build(location, order=order)
    old = catalog.version - 9
    export_old(catalog, location, "audit", "minimal", old)
    export_old(catalog, location, "snap", "partial", old + 1)
    live = catalog.transaction()
    live.create_table("s", "pending", columns=COLS)
    saved_before = files(catalog)
    live_id = versions.save_transaction(live)
    saved_tree = {p for p in files(catalog) - saved_before if p.startswith("node/")}
    dead = catalog.transaction()
    dead.create_table("s", "abandoned", columns=COLS)
    dead_id = versions.save_transaction(dead)
    expire_dtxn(catalog, dead_id)
    catalog.storage.write(ORPHAN, b"left by a crashed commit")
    for path in STRANGERS:
        catalog.storage.write(path, b"not ours")
    now = mark_old(catalog)
    young = "node/ffffffff-0000-4000-8000-000000000000.arrow"  # newer than now - grace
    catalog.storage.write(young, b"a commit in flight")
    return Scenario(catalog, before, old, live_id, saved_tree, dead_id, young, now,
                    files(catalog))
