"""The catalog's one-request reads and creates of a table's files
(:mod:`olympia.iceberg.fileio`), against a real S3 server and on local disk."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import synced_folder
from pyiceberg.io import load_file_io

from olympia.iceberg.fileio import create_file, read_file


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3),
                        pytest.param("obstore", marks=pytest.mark.s3)])
def place(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """A FileIO as the catalog makes it, and a folder it writes in (``obstore``: as a
    catalog that chose the obstore client makes it; s3fs is then never used)."""
    if request.param == "local":
        return load_file_io({}, f"file://{tmp_path}"), f"file://{tmp_path}"
    server = request.getfixturevalue("s3_server")
    opts = server.storage_options
    chosen = {"olympia.storage.client": "obstore"} if request.param == "obstore" else {}
    if chosen:
        import olympia.iceberg.fileio as fileio

        monkeypatch.setattr(fileio, "_s3fs", lambda io, location: pytest.fail("s3fs used"))
    io = load_file_io({"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
                       "s3.endpoint": server.endpoint_url, "s3.region": "us-east-1",
                       "s3.access-key-id": opts["key"], "s3.secret-access-key": opts["secret"],
                       **chosen})
    return io, f"s3://{server.bucket}/{tmp_path.name}"


def test_reads_whole_limited_empty_and_missing_files(place: tuple[Any, str]) -> None:
    io, folder = place
    create_file(io, f"{folder}/some.json", b"0123456789")
    create_file(io, f"{folder}/empty.json", b"")
    assert read_file(io, f"{folder}/some.json") == b"0123456789"
    assert read_file(io, f"{folder}/some.json", 4) == b"0123"
    assert read_file(io, f"{folder}/some.json", 11) == b"0123456789"
    assert read_file(io, f"{folder}/empty.json") == b""
    assert read_file(io, f"{folder}/empty.json", 4) == b""  # (S3 answers 416 to a range)
    with pytest.raises(FileNotFoundError):
        read_file(io, f"{folder}/missing.json", 4)
    with pytest.raises(FileNotFoundError):
        read_file(io, f"{folder}/missing.json")


def test_a_create_never_replaces_a_file(place: tuple[Any, str]) -> None:
    io, folder = place
    create_file(io, f"{folder}/m.json", b"first")
    with pytest.raises(FileExistsError):
        create_file(io, f"{folder}/m.json", b"second")
    assert read_file(io, f"{folder}/m.json") == b"first"


def test_a_local_create_is_synced_before_it_is_named(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """On local disk the file's bytes reach the disk before the file has its name, and its
    name before the create returns: a root synced later never names a metadata file that a
    crash left empty or without its name. Plain paths and ``file:`` URIs are one place;
    missing folders are made, each named durably in its parent."""
    import olympia.storage.file as local

    events: list[str] = []  # (this thread's: another test's threads may sync meanwhile)
    real_fsync, real_link, me = local.os.fsync, local.os.link, threading.get_ident()

    def note(event: str) -> None:
        if threading.get_ident() == me:
            events.append(event)

    def fsync(fd: int) -> None:
        real_fsync(fd)
        folder = synced_folder(fd, tmp_path)
        note("sync" if folder is None else f"sync {folder}")

    monkeypatch.setattr(local.os, "fsync", fsync)
    monkeypatch.setattr(local.os, "link", lambda *a, **k: (note("name"), real_link(*a, **k)))
    io = load_file_io({}, f"file://{tmp_path}")
    create_file(io, f"file://{tmp_path}/new/folder/m.json", b"metadata")
    assert events == ["sync .", "sync new", "sync", "name", "sync new/folder"]
    assert (tmp_path / "new" / "folder" / "m.json").read_bytes() == b"metadata"
    with pytest.raises(FileExistsError):
        create_file(io, f"{tmp_path}/new/folder/m.json", b"other")
    assert read_file(io, f"{tmp_path}/new/folder/m.json") == b"metadata"
