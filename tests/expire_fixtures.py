"""Helpers shared by the expiry tests (tests/test_expire_*.py)."""

from __future__ import annotations

import time
from typing import Any

from conftest import Location

from olympia import Catalog, versions
from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import dtxn_path
from olympia.exceptions import NotFoundError
from olympia.expire import ExpirePolicy
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


def mark_old() -> int:
    """Wait until every file written so far is older than the grace period at the returned
    instant (storage timestamps may be truncated to whole seconds), and return it."""
    time.sleep(2.2)
    return int(time.time() * 1000)


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


def export_old(catalog: Catalog, location: Location, name: str, mode: str, version: int,
               ) -> None:
    versions.export(catalog, name, location.sub(f"exports/{name}").uri, mode,
                    target_storage_options=location.storage_options, version=version,
                    depth=1 if mode == "partial" else None)
