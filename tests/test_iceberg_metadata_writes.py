"""A commit writes its tables' new metadata files in the batch that writes the version's own
files, so that a commit on S3 spends no round trip on them alone: before the root that names
them, again where the storage retries that batch, never over another file's content."""

from __future__ import annotations

import errno
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import synced_folder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iceberg_helpers import SCHEMA, local_properties, rows

from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    StorageError,
    TransientStorageError,
)
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.metadata import create_metadata_file
from olympia.iceberg.session import CACHE_PROPERTY


def _recorded(catalog: OlympiaCatalog, events: list[tuple[str, ...]]) -> None:
    """Record each publish of ``catalog``'s storage and each write run alongside it (with
    whether the root it publishes existed when the write ran)."""
    storage = catalog.olympia.storage
    publish = storage.publish

    def recording(files: dict[str, bytes], path: str, data: bytes, *rest: Any,
                  alongside: tuple[Callable[[], object], ...] = (), **named: Any) -> None:
        events.append(("publish", path))

        def run(write: Callable[[], object]) -> Callable[[], object]:
            def ran() -> object:
                events.append(("alongside", path, str(storage.exists(path))))
                return write()
            return ran

        publish(files, path, data, *rest, alongside=[run(w) for w in alongside], **named)
        events.append(("published", path))

    storage.publish = recording  # type: ignore[method-assign]


def test_the_metadata_file_is_written_in_the_batch_before_the_root(tmp_path: Path) -> None:
    catalog = OlympiaCatalog("c", **local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    events: list[tuple[str, ...]] = []
    _recorded(catalog, events)
    table.append(rows(0))
    root = events[0][1]
    assert events == [("publish", root), ("alongside", root, "False"), ("published", root)]
    location = table.metadata_location
    assert Path(location.removeprefix("file://")).is_file()
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 3


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names fds through /proc")
def test_every_name_an_append_gives_is_durable_before_it_returns_the_root_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Iceberg append on local disk: each file it names in the catalog and the table's
    folder (the table's definition, the metadata file, the root) has its folder
    synced after it got its name, every one before the root is named, and the root's
    folder before the append returns; only vn/latest, a hint, is never synced."""
    import olympia.storage.file as local

    catalog = OlympiaCatalog("c", **local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    table.append(rows(0))  # (the table's data and metadata folders exist from here on)
    events: list[tuple[str, str]] = []  # ("name", file) or ("sync", folder), relative
    real_fsync, real_link, real_replace = local.os.fsync, local.os.link, local.os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        folder = synced_folder(fd, tmp_path)
        if folder is not None:
            events.append(("sync", folder))

    def named(real: Callable[..., None]) -> Callable[..., None]:
        def call(src: str, dst: str, **kwargs: Any) -> None:
            real(src, dst, **kwargs)
            events.append(("name", os.path.relpath(dst, tmp_path)))
        return call

    monkeypatch.setattr(local.os, "fsync", fsync)
    monkeypatch.setattr(local.os, "link", named(real_link))
    monkeypatch.setattr(local.os, "replace", named(real_replace))
    table.append(rows(3))
    files = [path for kind, path in events if kind == "name"]
    root = next(path for path in files if re.fullmatch(r"catalog/vn/\d+", path))
    assert {path.split("/")[1] for path in files if path.startswith("catalog/")} == \
        {"def", "vn"}  # (a tree this small is all root)
    assert any(path.startswith("warehouse/ns/t/metadata/") for path in files)
    assert events[-1] == ("name", "catalog/vn/latest")  # a hint: never synced
    durable, at_root = events[:-1], events.index(("name", root))
    for path in files[:-2]:  # each name's folder synced after it, before the root is named
        at = durable.index(("name", path))
        assert ("sync", os.path.dirname(path)) in durable[at + 1:at_root], (path, durable)
    assert files[-2] == root and durable[at_root + 1:] == [("sync", "catalog/vn")]


def test_a_retried_batch_finds_its_own_metadata_file(tmp_path: Path) -> None:
    """The root's create fails transiently once, after the batch ran: the storage's retry
    runs the batch again, whose metadata write finds the file it made and succeeds."""
    catalog = OlympiaCatalog("c", **local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", SCHEMA)
    events: list[tuple[str, ...]] = []
    _recorded(catalog, events)
    backend = catalog.olympia.storage.backend
    create, failed = backend.create_exclusive, []

    def flaky(path: str, data: bytes) -> None:
        if "/vn/" in path and not failed:
            failed.append(path)
            raise OSError(errno.EAGAIN, "try again")
        create(path, data)

    backend.create_exclusive = flaky  # type: ignore[method-assign]
    table.append(rows(0))
    assert failed and [e[0] for e in events] == ["publish", "alongside", "alongside",
                                                 "published"]
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 3


def test_a_metadata_file_holding_other_bytes_is_refused_not_a_lost_race(
        tmp_path: Path) -> None:
    catalog = OlympiaCatalog("c", **local_properties(tmp_path))
    io = catalog._load_file_io(location=f"file://{tmp_path}/m.json")
    location = f"file://{tmp_path}/m.json"
    create_metadata_file(io, location, b"{}", "table ns.t")
    create_metadata_file(io, location, b"{}", "table ns.t")  # its own: an earlier try's
    with pytest.raises(StorageError, match="table ns.t: its new Iceberg metadata file exists "
                                           "already, holding other content") as taken:
        create_metadata_file(io, location, b"[]", "table ns.t")
    missing = f"file://{tmp_path}/{'x' * 300}/m.json"  # a folder name the disk refuses
    with pytest.raises(StorageError, match="table ns.t: cannot write") as refused:
        create_metadata_file(io, missing, b"{}", "table ns.t")
    # neither tells of the catalog's own files (a lost race, a vanished file)
    for error in (taken.value, refused.value):
        assert not isinstance(error, FileAlreadyExists | FileNotFound)


def test_a_transaction_reads_its_staged_metadata_before_the_commit_writes_it(
        tmp_path: Path) -> None:
    """More tables staged than the metadata cache holds: the first one's metadata, not yet
    written, is still read from memory by a later change to it in the same transaction."""
    catalog = OlympiaCatalog("c", **{**local_properties(tmp_path), CACHE_PROPERTY: "1"})
    catalog.create_namespace("ns")
    with catalog.transaction() as tx:
        for name in ("a", "b", "c"):
            tx.create_table(f"ns.{name}", SCHEMA)
        tx.load_table("ns.a").append(rows(0))
    assert catalog.load_table("ns.a").scan().to_arrow().num_rows == 3


# --- injected failures: the property --------------------------------------------------

#: what happens to one append's commit: its metadata write fails transiently once (the
#: storage retries the batch) or for good (the commit fails), its root's create fails
#: transiently once, or a rival lands a version first (the commit rebases, its metadata
#: file already written)
FAULTS = ("none", "metadata-once", "metadata-for-good", "root-once", "rival")
FAST = {"fsync": False, "retry_attempts": 2, "retry_backoff": 0}  # retries without pauses


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(faults=st.lists(st.tuples(st.sampled_from(FAULTS), st.booleans()), min_size=1,
                       max_size=8))
def test_no_version_names_a_metadata_file_it_lacks(
        tmp_path: Path, faults: list[tuple[str, bool]]) -> None:
    """Appends to two tables, each commit meeting one fault: every acknowledged append is
    in its table, no failed one is, every version's tables load (each metadata file its
    definitions name exists with the bytes they record), and a failed commit leaves no
    metadata file behind."""
    props = {**local_properties(tmp_path / uuid.uuid4().hex),
             **{f"olympia.storage.{k}": str(v) for k, v in FAST.items()}}
    catalog, rival = OlympiaCatalog("c", **props), OlympiaCatalog("r", **props)
    catalog.create_namespace("ns")
    for name in ("a", "b", "other"):
        catalog.create_table(("ns", name), SCHEMA)
    first = catalog.olympia.version  # every table exists from here on
    backend = catalog.olympia.storage.backend
    create_root, publish = backend.create_exclusive, catalog.olympia.storage.publish
    fault = ["none"]

    def root(path: str, data: bytes) -> None:
        if fault[0] == "root-once" and "/vn/" in path:
            fault[0] = "none"
            raise OSError(errno.EAGAIN, "try again")
        create_root(path, data)

    def batch(files: dict[str, bytes], path: str, data: bytes, *rest: Any,
              alongside: tuple[Callable[[], object], ...] = (), **named: Any) -> None:
        if fault[0] == "rival":
            fault[0] = "none"
            rival.load_table("ns.other").append(rows(100))

        def metadata(write: Callable[[], object]) -> Callable[[], object]:
            def run() -> object:
                if fault[0] in ("metadata-once", "metadata-for-good"):
                    if fault[0] == "metadata-once":
                        fault[0] = "none"
                    raise TransientStorageError("the metadata write failed")
                return write()
            return run

        publish(files, path, data, *rest, alongside=[metadata(w) for w in alongside],
                **named)

    backend.create_exclusive = root  # type: ignore[method-assign]
    catalog.olympia.storage.publish = batch  # type: ignore[method-assign]
    expected = {"a": 0, "b": 0}
    for n, (what, second) in enumerate(faults):
        name = "b" if second else "a"
        fault[0] = what
        try:
            catalog.load_table(("ns", name)).append(rows(n * 10, 1))
        except TransientStorageError:
            assert what == "metadata-for-good"
        else:
            assert what != "metadata-for-good"
            expected[name] += 1
    store = catalog.olympia
    for number in range(first, store.refresh() + 1):
        view = catalog.at_version(number)
        for name in ("a", "b", "other"):
            view.load_table(("ns", name)).scan().to_arrow()
    fresh = OlympiaCatalog("check", **props)
    for name, count in expected.items():
        assert fresh.load_table(("ns", name)).scan().to_arrow().num_rows == count
    named = {Path(fresh.at_version(v).load_table(("ns", t)).metadata_location
                  .removeprefix("file://")).name
             for v in range(first, store.refresh() + 1) for t in ("a", "b")}
    written = {p.name for t in ("a", "b")
               for p in (Path(props["warehouse"].removeprefix("file://")) / "ns" / t
                         / "metadata").glob("*.metadata.json")}
    assert written == named  # nothing left of a failed commit
