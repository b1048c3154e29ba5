"""Storage: operation counts (misses and failures too) and bulk deletes that S3 answers with
per-key errors (a SeaweedFS server whose DeleteObjects answers are doctored per key)."""

from __future__ import annotations

import errno
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Location

from olympia import Catalog
from olympia.exceptions import (
    FileNotFound,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.expire.reachability import delete_paths
from olympia.storage import FileInfo, Storage


def test_stats_count_every_read_including_misses(location: Location) -> None:
    storage = Storage(location.uri, location.storage_options)
    storage.write("a", b"xy")
    storage.stats.reset()
    assert storage.read("a") == b"xy"
    with pytest.raises(FileNotFound):
        storage.read("absent")
    assert not storage.exists("absent")
    counts = storage.stats.snapshot()
    assert (counts["reads"], counts["misses"], counts["bytes_read"], counts["exists"],
            counts["failures"]) == (2, 1, 2, 1, 0)
    catalog = Catalog.create(location.sub("c").uri, location.storage_options)
    cold = Catalog.open(catalog.uri, location.storage_options)
    cold.storage.stats.reset()
    assert cold.files.oldest_version() == 0  # vn/oldest is absent: still one round trip
    assert (cold.storage.stats.reads, cold.storage.stats.misses) == (1, 1)


class _Refusing:
    """A backend that fails reads of one path (by default as a permission problem would)."""

    def __init__(self, inner: Any, path: str, error: Exception | None = None) -> None:
        self.inner, self.path = inner, path
        self.error = error or PermissionError(f"access denied: {path}")

    def read(self, path: str) -> bytes:
        if path == self.path:
            raise self.error
        data: bytes = self.inner.read(path)
        return data

    def write(self, path: str, data: bytes) -> None:
        self.inner.write(path, data)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.inner.create_exclusive(path, data)

    def exists(self, path: str) -> bool:
        return bool(self.inner.exists(path))

    def list(self, prefix: str) -> list[FileInfo]:
        return list(self.inner.list(prefix))

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def delete_many(self, paths: list[str]) -> dict[str, str]:
        return dict(self.inner.delete_many(paths))


def test_stats_count_failed_operations() -> None:
    storage = Storage(f"memory://{uuid.uuid4().hex}")
    storage.write("secret", b"x")
    storage.backend = _Refusing(storage.backend, storage.full("secret"))
    storage.stats.reset()
    with pytest.raises(StorageError, match="access denied"):
        storage.read("secret")
    assert (storage.stats.reads, storage.stats.misses, storage.stats.failures) == (1, 0, 1)


class ReadTimeoutError(Exception):
    """Named like botocore's, which storage recognises by class name."""


@pytest.mark.parametrize(("error", "transient"), [
    (OSError(errno.EBUSY, "SlowDown"), True),  # what s3fs makes of a 503 SlowDown
    (OSError(errno.EREMOTEIO, "server error"), True),  # and of other 5xx answers
    (ReadTimeoutError("read timed out"), True),
    # s3fs's form of a code it has no errno for, e.g. a gateway error on a HEAD request
    (OSError(errno.EIO, "An error occurred (502) when calling the HeadObject operation"), True),
    (ConnectionResetError("reset by peer"), True),
    (PermissionError("access denied"), False),
    (OSError(errno.EINVAL, "bad request"), False),
])
def test_transient_failures_are_typed_and_retried(error: Exception, transient: bool) -> None:
    storage = Storage(f"memory://{uuid.uuid4().hex}")
    storage.write("f", b"x")
    storage.backend = _Refusing(storage.backend, storage.full("f"), error)
    storage.stats.reset()
    with pytest.raises(StorageError) as raised:
        storage.read("f")
    assert isinstance(raised.value, TransientStorageError) == transient
    assert storage.stats.reads == 1 and storage.stats.failures == 1


# --- S3 bulk deletes with per-key errors ---------------------------------------------------


class DeleteObjectsFaults:
    """Doctors one S3 client's DeleteObjects calls, as a throttled or partly failing server
    answers them: a key with codes queued in ``plan`` is left out of the request (so the
    object stays) and listed under ``Errors`` with the next code. A request left without
    keys sends one absent key instead (S3 refuses an empty list)."""

    def __init__(self, storage: Storage, plan: dict[str, list[str]]) -> None:
        self.storage = storage
        self.plan = {self._key(p): list(codes) for p, codes in plan.items()}
        self.requests = 0
        fs = storage.backend.fs  # type: ignore[attr-defined]
        fs.connect()
        self.events = fs.s3.meta.events
        self.events.register("before-parameter-build.s3.DeleteObjects", self._request)
        self.events.register("after-call.s3.DeleteObjects", self._response)

    def _key(self, path: str) -> str:
        return self.storage.full(path).partition("/")[2]

    def _request(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        self.requests += 1
        errors, kept = [], []
        for obj in params["Delete"]["Objects"]:
            codes = self.plan.get(obj["Key"])
            if codes:
                errors.append({"Key": obj["Key"], "Code": codes.pop(0), "Message": "injected"})
            else:
                kept.append(obj)
        params["Delete"]["Objects"] = kept or [{"Key": self._key("never-written")}]
        context["injected_errors"] = errors

    def _response(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        parsed.setdefault("Errors", []).extend(context.get("injected_errors", []))

    def close(self) -> None:
        self.events.unregister("before-parameter-build.s3.DeleteObjects", self._request)
        self.events.unregister("after-call.s3.DeleteObjects", self._response)


@pytest.fixture
def s3_storage(s3_server: Any) -> Iterator[Storage]:
    """A fresh prefix on the S3 server, with a client of its own (the faults stay in it)."""
    storage = Storage(f"s3://{s3_server.bucket}/{uuid.uuid4().hex}",
                      {**s3_server.storage_options, "skip_instance_cache": True})
    yield storage
    storage.close()


def _nodes(count: int) -> list[str]:
    return [f"node/{uuid.uuid4()}.arrow" for _ in range(count)]


@pytest.mark.s3
def test_bulk_delete_surfaces_per_key_errors(s3_storage: Storage) -> None:
    storage = s3_storage
    throttled, denied, *_ = paths = _nodes(5)
    storage.write_many({p: b"x" for p in paths})
    faults = DeleteObjectsFaults(storage, {throttled: ["SlowDown"], denied: ["AccessDenied"],
                                           "node/absent.arrow": ["NoSuchKey"]})
    try:
        with pytest.raises(PartialDeleteError) as raised:
            storage.delete_many([*paths, "node/absent.arrow"])
    finally:
        faults.close()
    errors = raised.value.errors
    assert sorted(errors) == sorted([throttled, denied])  # an absent key is no failure
    assert isinstance(errors[throttled], TransientStorageError)
    assert not isinstance(errors[denied], TransientStorageError)
    assert storage.display(denied) in str(errors[denied]) and "AccessDenied" in str(
        errors[denied])
    assert "2 files not deleted" in str(raised.value)
    assert {f.path for f in storage.list("node/")} == {throttled, denied}
    assert storage.stats.failures == 2


@pytest.mark.s3
def test_expiry_deletes_retry_throttled_keys_and_report_the_rest(s3_storage: Storage) -> None:
    storage = s3_storage
    throttled, denied, *_ = paths = _nodes(6)
    absent = _nodes(1)[0]
    storage.write_many({p: b"x" for p in paths})
    faults = DeleteObjectsFaults(storage, {throttled: ["SlowDown", "InternalError"],
                                           denied: ["AccessDenied"], absent: ["NoSuchKey"]})
    try:
        report = delete_paths(storage, [*paths, absent])
    finally:
        faults.close()
    assert faults.requests == 3  # the batch, then the throttled key twice (with backoff)
    assert report.attempted == {"node": 7} and report.failed == {"node": 1}
    assert len(report.errors) == 1 and denied in report.errors[0]
    assert "AccessDenied" in report.errors[0]
    assert {f.path for f in storage.list("node/")} == {denied}
