"""Several OS processes committing to one catalog at once, exclusive-create races, crashes."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest
from conftest import Location

from olympia import Catalog
from olympia.catalog.keys import version_path
from olympia.exceptions import CommitConflict, FileAlreadyExists
from olympia.storage import MemoryBackend, Storage
from olympia.tree import btree

SPAWN = mp.get_context("spawn")


def _writer(uri: str, options: dict[str, Any], worker: int, count: int) -> None:
    catalog = Catalog.open(uri, options)
    for i in range(count):
        catalog.create_table("shared", f"w{worker}_t{i}", columns=[{"name": "id", "type": "int8"}])


def _race_writer(uri: str, options: dict[str, Any], barrier: Any, name: str,
                 columns: list[dict[str, str]]) -> str:
    catalog = Catalog.open(uri, options)
    txn = catalog.transaction()
    txn.create_table("shared", name, columns=columns)
    barrier.wait()
    try:
        return f"committed {txn.commit()}"
    except CommitConflict as exc:
        return f"conflict {exc}"


def _create_exclusive(uri: str, options: dict[str, Any], barrier: Any, worker: int) -> bool:
    storage = Storage(uri, options)
    barrier.wait()
    try:
        storage.create_exclusive("race/file", f"writer {worker}".encode())
        return True
    except FileAlreadyExists:
        return False


def test_disjoint_writers_in_processes_all_land(shared_location: Location) -> None:
    catalog = Catalog.create(shared_location.uri, shared_location.storage_options, order=8)
    catalog.create_namespace("shared")
    workers, per_worker = 4, 6
    with SPAWN.Pool(workers) as pool:
        pool.starmap(_writer, [(shared_location.uri, shared_location.storage_options, w,
                                per_worker) for w in range(workers)])
    final = Catalog.open(shared_location.uri, shared_location.storage_options)
    expected = sorted(f"w{w}_t{i}" for w in range(workers) for i in range(per_worker))
    assert final.list_tables("shared") == expected
    assert final.version == 1 + workers * per_worker  # contiguous: one version per commit
    for v in range(1, final.version + 1):  # every root links to the one before it
        root = final.at_version(v).root.node
        assert root.previous_root == version_path(v - 1)
    snap = final.snapshot
    assert btree.validate(snap.nodes, snap.root.node, 8) == 1 + len(expected)


def test_same_object_in_processes_one_wins(shared_location: Location) -> None:
    catalog = Catalog.create(shared_location.uri, shared_location.storage_options)
    catalog.create_namespace("shared")
    barrier = SPAWN.Manager().Barrier(2)
    with SPAWN.Pool(2) as pool:
        results = pool.starmap(_race_writer, [
            (shared_location.uri, shared_location.storage_options, barrier, "orders",
             [{"name": "a", "type": "int4"}]),
            (shared_location.uri, shared_location.storage_options, barrier, "orders",
             [{"name": "b", "type": "varchar"}]),
        ])
    assert sorted(r.split()[0] for r in results) == ["committed", "conflict"]
    loser = next(r for r in results if r.startswith("conflict"))
    assert "shared.orders" in loser and "version 2" in loser
    final = Catalog.open(shared_location.uri, shared_location.storage_options)
    assert final.version == 2
    winner_column = final.load_table("shared.orders").columns[0].name
    assert winner_column in ("a", "b")


@pytest.mark.parametrize("writers", [16])
def test_exclusive_create_race(shared_location: Location, writers: int) -> None:
    barrier = SPAWN.Manager().Barrier(writers)
    with SPAWN.Pool(writers) as pool:
        wins = pool.starmap(_create_exclusive, [
            (shared_location.uri, shared_location.storage_options, barrier, w)
            for w in range(writers)])
    assert wins.count(True) == 1
    winner = wins.index(True)
    body = Storage(shared_location.uri, shared_location.storage_options).read("race/file")
    assert body == f"writer {winner}".encode()


def test_exclusive_create_threads_memory() -> None:
    storage = Storage("memory://race-threads")
    results: list[bool] = []
    start = threading.Barrier(32)

    def go(i: int) -> None:
        start.wait()
        try:
            storage.create_exclusive("x", str(i).encode())
            results.append(True)
        except FileAlreadyExists:
            results.append(False)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1


class _SlowCheck(dict[str, Any]):
    """A memory store whose membership test takes a while: any writer that checks outside
    the store's one lock then overlaps with the others."""

    def __contains__(self, key: object) -> bool:
        found = super().__contains__(key)
        time.sleep(0.002)  # the answer may be stale by the time the caller acts on it
        return found


def test_exclusive_create_memory_across_storage_instances() -> None:
    """Every Storage on one memory:// name shares the files, so it must share the lock: each
    thread opens its own Storage and exactly one of them creates the file."""
    name = f"race-instances-{uuid.uuid4().hex}"
    MemoryBackend._stores[name] = _SlowCheck()
    writers = 32
    storages = [Storage(f"memory://{name}") for _ in range(writers)]
    start = threading.Barrier(writers)
    wins: list[int] = []

    def go(i: int) -> None:
        start.wait()
        try:
            storages[i].create_exclusive("race/file", f"writer {i}".encode())
            wins.append(i)
        except FileAlreadyExists:
            pass

    threads = [threading.Thread(target=go, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert Storage(f"memory://{name}").read("race/file") == f"writer {wins[0]}".encode()


CRASHING_WRITER = textwrap.dedent("""
    import os, sys, json
    from olympia import Catalog

    uri, options = sys.argv[1], json.loads(sys.argv[2])
    catalog = Catalog.open(uri, options)
    backend = type(catalog.storage.backend)
    real = backend.create_exclusive

    def crash(self, path, data):
        if "vn/" in path:
            os._exit(17)  # killed after node and def files, before the root is created
        return real(self, path, data)

    backend.create_exclusive = crash
    with catalog.transaction() as txn:
        for i in range(50):
            txn.create_table("s", f"lost{i}", columns=[{"name": "x", "type": "int4"}])
""")


def test_writer_killed_before_root_leaves_previous_version(shared_location: Location) -> None:
    import json

    catalog = Catalog.create(shared_location.uri, shared_location.storage_options, order=4)
    with catalog.transaction() as txn:
        txn.create_namespace("s")
        for i in range(30):
            txn.create_table("s", f"kept{i:02d}", columns=[{"name": "x", "type": "int4"}])
    files_before = {f.path for f in catalog.storage.list()}
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, shared_location.uri,
         json.dumps(shared_location.storage_options)],
        capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )
    assert proc.returncode == 17, proc.stderr
    files_after = {f.path for f in catalog.storage.list()}
    assert any(p.startswith("node/") for p in files_after - files_before)  # it did write nodes
    reopened = Catalog.open(shared_location.uri, shared_location.storage_options)
    assert reopened.version == 1
    assert reopened.list_tables("s") == [f"kept{i:02d}" for i in range(30)]
    snap = reopened.snapshot
    assert btree.validate(snap.nodes, snap.root.node, 4) == 31
    reopened.create_table("s", "after_crash", columns=[{"name": "x", "type": "int4"}])
    assert reopened.version == 2


FORKING_WRITER = textwrap.dedent("""
    import json, multiprocessing as mp, sys
    from olympia import Catalog

    uri, options = sys.argv[1], json.loads(sys.argv[2])
    catalog = Catalog.open(uri, options)
    catalog.create_table("s", "parent", columns=[{"name": "x", "type": "int4"}])
    catalog.storage.map(catalog.storage.exists, ["vn/latest", "vn/oldest"])  # pool running

    def child() -> None:  # the inherited catalog and its storage, used after fork
        catalog.create_table("s", "child", columns=[{"name": "x", "type": "int4"}])
        catalog.storage.map(catalog.storage.exists, ["vn/latest", "vn/oldest"])
        print("child tables", catalog.list_tables("s"), flush=True)

    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join(timeout=90)
    if proc.exitcode is None:
        proc.kill()
        sys.exit("the forked child hung")
    catalog.create_table("s", "parent_after", columns=[{"name": "x", "type": "int4"}])
    sys.exit(proc.exitcode)
""")


@pytest.mark.s3
def test_forked_child_commits_on_s3_with_inherited_catalog(s3_server: Any) -> None:
    """A process forked after the parent used an S3 catalog re-creates its storage clients
    and thread pool: its commit lands, without hanging and without event-loop errors."""
    import json

    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    options = dict(s3_server.storage_options)
    Catalog.create(uri, options).create_namespace("s")
    proc = subprocess.run(
        [sys.executable, "-c", FORKING_WRITER, uri, json.dumps(options)],
        capture_output=True, text=True, timeout=240, env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "child tables ['child', 'parent']" in proc.stdout
    assert "attached to a different loop" not in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert Catalog.open(uri, options).list_tables("s") == ["child", "parent", "parent_after"]
