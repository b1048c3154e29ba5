"""Storage: operation counts (misses and failures too) and bulk deletes that S3 answers with
per-key errors (a SeaweedFS server whose DeleteObjects answers are doctored per key)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from conftest import Location, synced_folder
from s3server import Fault, FaultProxy

from olympia import Catalog
from olympia.catalog.keys import version_path
from olympia.exceptions import (
    FileAlreadyExists,
    FileChanged,
    FileNotFound,
    InsufficientStorageError,
    InvalidArgumentError,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.expire.reachability import delete_paths
from olympia.storage import Backend, FileInfo, Storage, classify


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


class _Refusing(Backend):
    """A backend that fails reads of one path (by default as a permission problem would)."""

    def __init__(self, inner: Backend, path: str, error: Exception | None = None) -> None:
        self.inner, self.path = inner, path
        self.remote = inner.remote
        self.error = error or PermissionError(f"access denied: {path}")

    def read(self, path: str) -> bytes:
        if path == self.path:
            raise self.error
        return self.inner.read(path)

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.inner.write(path, data, durable)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.inner.create_exclusive(path, data)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, prefix: str) -> list[FileInfo]:
        return self.inner.list(prefix)

    def delete_many(self, paths: Sequence[str]) -> dict[str, str]:
        return self.inner.delete_many(paths)


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


# --- one retry helper: classified by errno, S3 code, HTTP status and error type ----------


def test_a_permanent_local_error_is_raised_at_once(tmp_path: Any) -> None:
    """A path that cannot exist (a component is a file) fails permanently, even though it
    holds "503": nothing is retried and the error is no TransientStorageError."""
    storage = Storage(str(tmp_path / "c"))
    storage.write("node", b"a file where a folder should be")
    path = "node/1b503c7e-0000-4000-8000-000000000000.arrow"
    for op in (lambda: storage.read(path), lambda: storage.write(path, b"x"),
               lambda: storage.create_exclusive(path, b"x")):
        storage.stats.reset()
        with pytest.raises(StorageError) as raised:
            op()
        assert type(raised.value) is StorageError and storage.display(path) in str(raised.value)
        assert (storage.stats.retries, storage.stats.failures) == (0, 1)


def test_a_denied_local_file_is_a_permanent_error(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path / "c"))
    storage.write("node/x.arrow", b"x")
    target = tmp_path / "c" / "node" / "x.arrow"
    target.chmod(0)
    try:
        readable = os.access(target, os.R_OK)  # root reads anything: nothing to test then
        if readable:
            pytest.skip("running as a user whom file permissions do not stop")
        with pytest.raises(StorageError) as raised:
            storage.read("node/x.arrow")
    finally:
        target.chmod(0o644)
    assert type(raised.value) is StorageError and storage.stats.retries == 0


@pytest.mark.parametrize(("error", "kind"), [
    (OSError(errno.ENOTDIR, "Not a directory: node/1b503c7e.arrow"), StorageError),
    (FileNotFoundError("gone"), FileNotFound),
    (FileExistsError("there"), FileAlreadyExists),
    (TimeoutError("timed out"), TransientStorageError),
    # botocore's words where s3fs translated a code it has no errno for: only then
    (OSError(errno.EIO, "An error occurred (504) when calling the GetObject operation"),
     TransientStorageError),
    (PermissionError(errno.EACCES, "An error occurred (503) when calling the x operation"),
     StorageError),
    # a store without room for the write; a read-only one is a failure like any other
    (OSError(errno.ENOSPC, "No space left on device"), InsufficientStorageError),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), InsufficientStorageError),
    (OSError(errno.EFBIG, "File too large"), InsufficientStorageError),
    (OSError(errno.EROFS, "Read-only file system"), StorageError),
    (OSError(errno.EIO, "An error occurred (EntityTooLarge) when calling the PutObject "
                        "operation: too big"), InsufficientStorageError),
])
def test_classify_builtin_errors(error: Exception, kind: type) -> None:
    assert classify(error) is kind


def test_classify_bulk_delete_codes() -> None:
    assert classify("SlowDown: Please reduce your request rate.") is TransientStorageError
    assert classify("InternalError: 503 in the message") is TransientStorageError
    assert classify("AccessDenied: node/1b503c7e.arrow") is StorageError
    assert classify("QuotaExceeded: over the bucket's quota") is InsufficientStorageError


GETS = frozenset({"GET", "HEAD"})


@pytest.fixture
def proxy(s3_server: Any) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.endpoint_url) as relay:
        yield relay


def _through(proxy: FaultProxy, s3_server: Any, **settings: Any) -> Storage:
    options = {**proxy.storage_options(s3_server.storage_options), **settings}
    return Storage(f"s3://{s3_server.bucket}/{uuid.uuid4().hex}", options)


@pytest.mark.s3
@pytest.mark.parametrize(("status", "code", "methods"), [
    (503, "SlowDown", GETS), (500, "InternalError", GETS), (502, "BadGateway", GETS),
    (504, "GatewayTimeout", GETS), (429, "TooManyRequests", GETS),
    (503, "ServiceUnavailable", GETS),
    (400, "RequestTimeout", frozenset({"GET"})),  # a HEAD answer has no body: only 400
])
def test_s3_transient_answers_are_retried_then_reported(
        proxy: FaultProxy, s3_server: Any, status: int, code: str,
        methods: frozenset[str]) -> None:
    storage = _through(proxy, s3_server, retry_attempts=3, retry_backoff=0)
    storage.write("vn/latest", b"7")
    proxy.fault = Fault(methods, status, code, times=2)  # two failures, then the real answer
    assert storage.read("vn/latest") == b"7"
    assert storage.stats.retries == 2 and proxy.refused == 2
    proxy.fault = Fault(methods, status, code)  # never recovers
    storage.stats.reset()
    with pytest.raises(TransientStorageError, match="after 3 tries") as raised:
        storage.read("vn/latest")
    assert storage.display("vn/latest") in str(raised.value)
    assert (storage.stats.retries, storage.stats.failures) == (2, 1)


@pytest.mark.s3
@pytest.mark.parametrize(("status", "code"), [(403, "AccessDenied"), (400, "InvalidRequest"),
                                              (501, "NotImplemented")])
def test_s3_permanent_answers_are_raised_at_once(
        proxy: FaultProxy, s3_server: Any, status: int, code: str) -> None:
    storage = _through(proxy, s3_server, retry_attempts=5)
    path = "node/1b503c7e-0000-4000-8000-000000000000.arrow"
    storage.write(path, b"x")
    proxy.fault = Fault(GETS | {"PUT"}, status, code)
    for op in (lambda: storage.read(path), lambda: storage.write(path, b"y"),
               lambda: storage.create_exclusive("vn/00000000000000000000000000000001", b"r")):
        proxy.refused = 0
        with pytest.raises(StorageError) as raised:
            op()
        assert not isinstance(raised.value, TransientStorageError | FileAlreadyExists)
        assert proxy.refused == 1  # one request, no retry_attempts tries
    assert storage.stats.retries == 0


@pytest.mark.s3
def test_s3_each_operation_is_one_request(proxy: FaultProxy, s3_server: Any) -> None:
    """A read, a read of a missing file, an existence check either way and a write each
    cost one request (s3fs on its own adds a HEAD before a GET and a LIST after a 404)."""
    storage = _through(proxy, s3_server)
    storage.write("vn/latest", b"7")

    def missing_read() -> None:
        with pytest.raises(FileNotFound):
            storage.read("vn/oldest")

    ops = {"read": lambda: storage.read("vn/latest"), "missing read": missing_read,
           "exists": lambda: storage.exists("vn/latest"),
           "absent": lambda: storage.exists("vn/00000000000000000000000000000001"),
           "write": lambda: storage.write("vn/latest", b"8"),
           "create": lambda: storage.create_exclusive("vn/10000000000000000000000000000000",
                                                      b"r")}
    counted = {}
    for name, op in ops.items():
        before = proxy.requests
        op()
        counted[name] = proxy.requests - before
    assert counted == dict.fromkeys(ops, 1)
    assert storage.exists("vn/latest") and not storage.exists("vn/oldest")


@pytest.mark.s3
def test_s3_exclusive_create_shares_the_retry_helper(proxy: FaultProxy,
                                                     s3_server: Any) -> None:
    storage = _through(proxy, s3_server, retry_attempts=3, retry_backoff=0)
    put = frozenset({"PUT"})
    proxy.fault = Fault(put, 503, "SlowDown", times=1)
    storage.create_exclusive("a", b"1")  # throttled once, then created
    # the server created the file but the answer was lost: the retry's 412 is our own file
    proxy.fault = Fault(put, 500, "InternalError", times=1, after_relay=True)
    storage.create_exclusive("b", b"2")
    assert storage.read("b") == b"2" and storage.stats.retries == 2
    with pytest.raises(FileAlreadyExists):  # a real loser: another writer's file
        storage.create_exclusive("b", b"other")
    proxy.fault = Fault(put, 503, "SlowDown")
    with pytest.raises(TransientStorageError, match="exclusive create failed after 3 tries"):
        storage.create_exclusive("c", b"3")
    # every answer lost, the first try landed: the file is ours, so the create succeeded
    proxy.fault = Fault(put, 504, "GatewayTimeout", after_relay=True)
    storage.create_exclusive("d", b"4")
    proxy.fault = None
    assert storage.read("d") == b"4"


@pytest.mark.s3
def test_a_closed_port_fails_after_the_configured_tries() -> None:
    """No server: each try is one request (botocore and s3fs do not retry on their own),
    and the error is transient and names the file."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the socket is
    storage = Storage("s3://bucket/prefix", {
        "key": "k", "secret": "not-echoed", "retry_attempts": 3, "retry_backoff": 0,
        "skip_instance_cache": True,
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "x"}})
    fs = storage.backend.fs  # type: ignore[attr-defined]
    fs.connect()
    sent: list[str] = []
    fs.s3.meta.events.register("before-send.s3", lambda **kw: sent.append(kw["event_name"]))
    with pytest.raises(TransientStorageError, match="after 3 tries") as raised:
        storage.read("vn/latest")
    assert len(sent) == 3 and storage.stats.retries == 2
    assert "s3://bucket/prefix/vn/latest" in str(raised.value)
    assert "not-echoed" not in str(raised.value)
    config = fs.s3.meta.config
    assert (config.connect_timeout, config.retries["total_max_attempts"]) == (2.0, 1)


# --- storage options ----------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"max_concurrency": "abc"}, "max_concurrency must be an integer from 1 to 1024"),
    ({"max_concurrency": 0}, "max_concurrency must be an integer"),
    ({"max_concurrency": True}, "max_concurrency must be an integer"),
    ({"retry_attempts": 1.5}, "retry_attempts must be an integer"),
    ({"connect_timeout": "soon"}, "connect_timeout must be a number"),
    ({"read_timeout": -1}, "read_timeout must be a number"),
])
def test_bad_settings_are_named_not_echoed(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        Storage("memory://x", options)
    assert str(next(iter(options.values()))) not in str(raised.value).split("must be")[0]


def test_settings_from_text_values() -> None:
    storage = Storage("memory://x", {"max_concurrency": "3", "connect_timeout": "0.5"})
    assert (storage.concurrency, storage.settings.connect_timeout) == (3, 0.5)


@pytest.mark.parametrize("key", ["client_kwargs", "config_kwargs", "s3_additional_kwargs"])
def test_s3_object_options_must_be_objects(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"storage option {key} must be a JSON"):
        Storage("s3://bucket/p", {key: "endpoint_url=http://x", "secret": "s3cr3t"})


# --- map: nothing runs on after it raised -------------------------------------------------


def test_map_cancels_the_rest_and_waits_for_the_started(tmp_path: Any) -> None:
    storage = Storage(str(tmp_path / "c"), {"max_concurrency": 2})
    lock = threading.Lock()
    started: list[int] = []
    finished: list[int] = []
    first_running, second_failed = threading.Event(), threading.Event()

    def work(i: int) -> int:
        with lock:
            started.append(i)
        if i == 0:  # still running when item 1 fails
            first_running.set()
            assert second_failed.wait(30)
        elif i == 1:
            assert first_running.wait(30)
            second_failed.set()
            raise RuntimeError("interrupted")
        storage.write(f"f{i}", b"x")
        with lock:
            finished.append(i)
        return i

    with pytest.raises(RuntimeError, match="interrupted"):
        storage.map(work, range(2000))
    with lock:
        seen = (list(started), list(finished))
    assert 0 in seen[1]  # item 0 had started: map waited for it
    assert sorted(seen[1]) == sorted(i for i in seen[0] if i != 1)  # none still running
    assert len(seen[0]) < 2000  # the rest were cancelled
    storage.close()  # the pool's threads end; nothing else ran after map raised
    assert (started, finished) == seen
    assert storage.map(lambda i: i * 2, range(5)) == [0, 2, 4, 6, 8]


# --- the CLI: bad options and dead endpoints are clear errors, secrets never echoed -------


def _olympia(*args: str, env: dict[str, str] | None = None) -> Any:
    from click.testing import CliRunner

    from olympia.cli import main

    out = CliRunner().invoke(main, list(args), env=env or {})
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    return out


@pytest.mark.parametrize("value", ['["key", "s3cr3t-value"]', '"s3cr3t-value"', "7",
                                   '{"secret": "s3cr3t-value"', "null"])
def test_storage_options_env_that_is_no_object_is_not_echoed(tmp_path: Any,
                                                              value: str) -> None:
    out = _olympia("ls", "-c", str(tmp_path / "c"), env={"OLYMPIA_STORAGE_OPTIONS": value})
    assert out.exit_code == 1 and "OLYMPIA_STORAGE_OPTIONS" in out.output
    assert "s3cr3t" not in out.output


@pytest.mark.parametrize(("option", "message"), [
    ("max_concurrency=abc", "storage option max_concurrency must be an integer"),
    ("max_concurrency=0", "storage option max_concurrency must be an integer"),
    ("client_kwargs=s3cr3t", "storage option client_kwargs must be a JSON object"),
    ("retry_attempts=-3", "storage option retry_attempts must be an integer"),
])
def test_bad_storage_options_are_clear_errors(option: str, message: str) -> None:
    out = _olympia("ls", "-c", "s3://bucket/prefix", "-o", option)
    assert out.exit_code == 1 and message in out.output and "s3cr3t" not in out.output


@pytest.mark.s3
def test_a_dead_endpoint_fails_every_command_quickly_and_clearly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = {"key": "k", "secret": "s3cr3t-value", "retry_attempts": 2,
               "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    env = {"OLYMPIA_STORAGE_OPTIONS": json.dumps(options)}
    for args in (["ls"], ["log"], ["init"]):
        out = _olympia(*args, "-c", "s3://bucket/prefix", env=env)
        assert out.exit_code == 1, (args, out.output)
        assert "after 2 tries" in out.output and "s3://bucket/prefix/" in out.output
        assert "s3cr3t" not in out.output


def test_backends_come_from_the_scheme_table(tmp_path: Any) -> None:
    from olympia.storage import SCHEMES, LocalBackend, MemoryBackend
    from olympia.storage.abfs import AzureBackend
    from olympia.storage.gs import GcsBackend
    from olympia.storage.s3 import S3Backend

    assert {k: v.name for k, v in SCHEMES.items()} == {
        "": "file", "file": "file", "local": "file", "memory": "memory", "s3": "s3",
        "s3a": "s3", "gs": "gs", "abfs": "abfs", "abfss": "abfs", "az": "abfs"}
    local = Storage(str(tmp_path / "a"))
    assert isinstance(local.backend, LocalBackend)
    assert local.uri == f"file://{tmp_path}/a"
    assert isinstance(Storage("memory://x").backend, MemoryBackend)
    assert isinstance(Storage("s3://bucket/p", {"endpoint_url": "http://127.0.0.1:1"}).backend,
                      S3Backend)
    assert isinstance(Storage("gs://bucket/p", {"endpoint_url": "http://127.0.0.1:1",
                                                "token": "t"}).backend, GcsBackend)
    assert isinstance(Storage("az://c/p", {"endpoint_url": "http://127.0.0.1:1/acct",
                                           "sas_token": "sv=x"}).backend, AzureBackend)
    with pytest.raises(StorageError, match="unsupported storage scheme 'hdfs'"):
        Storage("hdfs://host/p")


def test_same_place_however_spelled(tmp_path: Any) -> None:
    a = Storage(str(tmp_path / "a"))
    (tmp_path / "link").symlink_to(tmp_path)
    assert a.same_place(Storage(f"file://{tmp_path}/a/"))
    assert a.same_place(Storage(str(tmp_path / "link" / "a")))
    assert not a.same_place(Storage(str(tmp_path / "b")))
    name = uuid.uuid4().hex
    assert Storage(f"memory://{name}").same_place(Storage(f"memory://{name}/"))
    assert not Storage(f"memory://{name}").same_place(Storage(f"memory://{name}-2"))
    assert not a.same_place(Storage(f"memory://{name}"))
    s3 = {"endpoint_url": "http://127.0.0.1:1"}
    assert Storage("s3://bucket/p", s3).same_place(Storage("s3a://bucket/p/", s3))
    assert not Storage("s3://bucket/p", s3).same_place(Storage("s3://bucket/q", s3))
    assert not Storage("s3://bucket/p", s3).same_place(
        Storage("s3://bucket/p", {"endpoint_url": "http://127.0.0.1:2"}))


_UNNAMED = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
needs_unnamed_files = pytest.mark.skipif(
    not _UNNAMED, reason="unnamed files need Linux O_TMPFILE and /proc")


@needs_unnamed_files
def test_local_sync_and_exclusive_loss(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                       ) -> None:
    """Local disk syncs every file but vn/latest (a hint that discovery checks), then its
    folder, which makes its name durable; an exclusive create of a file that exists fails
    leaving the file and its folder as they were (it may write and sync the doomed data
    first: the commit looks before it)."""
    synced: list[str] = []  # "file", or the folder synced
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(synced_folder(fd, tmp_path / "c") or "file")

    monkeypatch.setattr(os, "fsync", fsync)
    catalog = Catalog.create(str(tmp_path / "c"))
    synced.clear()
    catalog.files.write_hint("vn/latest", 0)
    assert synced == []
    catalog.files.write_hint("vn/oldest", 0)
    assert synced == ["file", "vn"]
    synced.clear()
    catalog.storage.stats.reset()
    catalog.create_namespace("a")  # its definition, the nodes, the root, then vn/latest
    assert synced.count("file") == catalog.storage.stats.writes - 1 >= 2
    # each file, then its folder; def/namespace is new: first its name in def
    assert synced == ["def", "file", "def/namespace", "file", "vn"]
    synced.clear()
    before = sorted(os.listdir(tmp_path / "c" / "vn"))
    with pytest.raises(FileAlreadyExists):
        catalog.storage.create_exclusive(version_path(1), b"other")
    assert synced == ["file"]  # the doomed data, never named
    assert sorted(os.listdir(tmp_path / "c" / "vn")) == before
    assert catalog.storage.read(version_path(1)) != b"other"


@needs_unnamed_files
def test_local_folders_made_for_a_file_are_named_durably(tmp_path: Any,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    """A folder a write creates (a new table's metadata folder and its parents) gets its
    name synced in its parent, from the top down, before the file is linked in it; a
    storage opened with ``fsync=False`` syncs nothing."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        folder = synced_folder(fd, tmp_path)
        if folder is not None:
            synced.append(folder)

    monkeypatch.setattr(os, "fsync", fsync)
    (tmp_path / "w").mkdir()
    Storage(str(tmp_path / "w")).create_exclusive("ns/t/metadata/00001.json", b"{}")
    assert synced == ["w", "w/ns", "w/ns/t", "w/ns/t/metadata"]
    synced.clear()
    Storage(str(tmp_path / "w"), {"fsync": False}).write("ns/u/metadata/x.json", b"{}")
    assert synced == []


def test_small_reads_stay_on_the_calling_thread_unless_remote(location: Location) -> None:
    """A batch of reads runs on the calling thread where reads need no round trip, on the
    I/O threads (concurrently) on S3; the results keep their order either way."""
    storage = Storage(location.uri, location.storage_options)
    storage.write_many({f"f{i}": bytes([i]) for i in range(4)})
    threads: set[str] = set()

    def read(path: str) -> bytes:
        threads.add(threading.current_thread().name)
        return storage.read(path)

    assert storage.map_requests(read, [f"f{i}" for i in (3, 1, 2)]) == [b"\x03", b"\x01", b"\x02"]
    remote = location.uri.startswith("s3://")
    assert storage.backend.remote is remote
    assert (threads == {threading.current_thread().name}) is not remote
    storage.write("vn/0", b"x")
    assert storage.known_to_exist("vn/0") is not remote and not storage.known_to_exist("vn/1")


def _without_named_temps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every named temp file the local backend stages."""
    from olympia.storage import LocalBackend

    staged: list[str] = []
    real = LocalBackend._temp

    def temp(self: LocalBackend, path: str, data: bytes, durable: bool = True) -> str:
        staged.append(path)
        return real(self, path, data, durable)

    monkeypatch.setattr(LocalBackend, "_temp", temp)
    return staged


@needs_unnamed_files
def test_local_new_files_are_linked_from_unnamed_files(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit's new files (definition, nodes, root) are written unnamed and linked into
    place, so no temp file is ever named in the folder; a file replaced in place (the
    vn/latest hint) is staged as a named temp file and renamed."""
    staged = _without_named_temps(monkeypatch)
    catalog = Catalog.create(str(tmp_path / "c"))
    catalog.create_namespace("a")
    assert staged == [str(tmp_path / "c" / "vn" / "latest")]  # a's commit replaces it
    with pytest.raises(FileAlreadyExists):
        catalog.storage.create_exclusive(version_path(1), b"other")
    assert catalog.storage.backend._unnamed  # type: ignore[attr-defined]
    assert not [f for f in os.listdir(tmp_path / "c" / "vn") if f.startswith(".tmp-")]


@pytest.mark.parametrize("refused", ["open", "link"])
def test_local_writes_fall_back_to_named_temps_where_unnamed_files_are_refused(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, refused: str) -> None:
    """A file system that refuses unnamed files (O_TMPFILE at open, or linking one through
    /proc) is asked once; from then on files are staged as named temps."""
    storage = Storage(str(tmp_path / "c"))
    asked: list[str] = []
    real_open, real_link = os.open, os.link
    unnamed = getattr(os, "O_TMPFILE", -1)

    def opening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & unnamed == unnamed and refused == "open":
            asked.append(str(path))
            raise OSError(errno.EOPNOTSUPP, "not supported", path)
        return real_open(path, flags, *args, **kwargs)

    def linking(src: str, dst: str, **kwargs: Any) -> None:
        if src.startswith("/proc/") and refused == "link":
            asked.append(dst)
            raise OSError(errno.EXDEV, "cross-device link", src)
        real_link(src, dst, **kwargs)

    asks = 1 if storage.backend._unnamed else 0  # type: ignore[attr-defined]
    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "link", linking)
    staged = _without_named_temps(monkeypatch)
    storage.write("node/x.arrow", b"one")
    storage.create_exclusive("vn/1", b"root")
    storage.write("node/y.arrow", b"two")
    assert storage.read("node/x.arrow") == b"one" and storage.read("vn/1") == b"root"
    assert len(staged) == 3 and len(asked) == asks  # asked once, where there is O_TMPFILE
    with pytest.raises(FileAlreadyExists):
        storage.create_exclusive("vn/1", b"other")
    assert storage.read("vn/1") == b"root"
    assert not [f for f in os.listdir(tmp_path / "c" / "node") if f.startswith(".tmp-")]


def test_a_local_file_created_during_a_write_is_replaced(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """write() replaces: when the file appears after the writer looked (another writer
    created it), the write still lands, by rename instead of link."""
    storage = Storage(str(tmp_path / "c"))
    storage.write("def/t.binpb", b"first")
    full = str(tmp_path / "c" / "def" / "t.binpb")
    real_lexists = os.path.lexists
    monkeypatch.setattr(os.path, "lexists", lambda p: False if p == full else real_lexists(p))
    storage.write("def/t.binpb", b"second")
    assert storage.read("def/t.binpb") == b"second"
    assert not [f for f in os.listdir(tmp_path / "c" / "def") if f.startswith(".tmp-")]


def test_publish_names_the_file_after_writing_the_others(location: Location) -> None:
    """publish() writes the files, then creates the named one exclusively; a lost race
    leaves the existing file as it was (the files were written, and are orphans)."""
    storage = Storage(location.uri, location.storage_options)
    storage.publish({"node/a.arrow": b"a", "def/b.binpb": b"b"}, "vn/1", b"root")
    assert [storage.read(p) for p in ("node/a.arrow", "def/b.binpb", "vn/1")] == [
        b"a", b"b", b"root"]
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/c.arrow": b"c"}, "vn/1", b"other")
    assert storage.read("vn/1") == b"root"
    assert [f.path for f in storage.list("vn/")] == ["vn/1"]
    assert storage.exists("node/c.arrow")


def test_publish_creates_nothing_once_a_file_it_builds_on_changed(location: Location) -> None:
    """With ``unchanged``, the named file is created only while each of those files still
    holds the content of that digest (read in the batch that writes the others): not once
    it holds other content, nor once it is gone; the error names it and its digest."""
    storage = Storage(location.uri, location.storage_options)
    storage.write("vn/1", b"one")
    storage.publish({"node/a": b"a"}, "vn/2", b"two", unchanged={"vn/1": _sha256(b"one")})
    assert storage.read("vn/2") == b"two"
    storage.write("vn/2", b"restored")
    for now in (b"restored", None):
        with pytest.raises(FileChanged, match="vn/2") as info:
            storage.publish({"node/b": b"b"}, "vn/3", b"three",
                            unchanged={"vn/2": _sha256(b"two")})
        assert info.value.digest == (now and _sha256(now))
        assert not storage.exists("vn/3")
        storage.delete("vn/2")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@needs_unnamed_files
def test_local_publish_syncs_every_file_before_naming_it_and_the_root_last(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On local disk each file is written unnamed, synced, then linked at its name, and
    its folder synced (the files on the calling thread or concurrently, each on one
    thread); the root after all of them, its folder synced before publish returns: a
    crash of the machine leaves no partly written file under a name, never a root without
    its files, and never loses a root once published. A lost race (the root exists) names
    no root and leaves it as it was."""
    storage = Storage(str(tmp_path / "c"))
    storage.write("vn/.keep", b"")  # the folders exist: every link below is a file's
    storage.write("node/.keep", b"")
    steps: list[tuple[int, str]] = []  # (thread, what it did)
    real_link, real_fsync = os.link, os.fsync

    def linking(src: str, dst: str, **kwargs: Any) -> None:
        real_link(src, dst, **kwargs)
        steps.append((threading.get_ident(), os.path.relpath(dst, tmp_path / "c")))

    def syncing(fd: int) -> None:
        real_fsync(fd)
        folder = synced_folder(fd, tmp_path / "c")
        steps.append((threading.get_ident(), "sync" if folder is None else f"sync {folder}"))

    monkeypatch.setattr(os, "link", linking)
    monkeypatch.setattr(os, "fsync", syncing)
    files = {f"node/{name}.arrow": name.encode() for name in "abcd"}
    storage.publish(files, "vn/1", b"root")
    for thread, step in steps:
        if not step.startswith("sync"):  # a link: after its file's sync, before its folder's
            mine = [s for t, s in steps if t == thread]
            at = mine.index(step)
            assert mine[at - 1:at + 2] == ["sync", step, f"sync {os.path.dirname(step)}"], steps
    named = [s for _, s in steps[:-3] if not s.startswith("sync")]
    assert sorted(named) == sorted(files)
    assert [s for _, s in steps[-3:]] == ["sync", "vn/1", "sync vn"]
    assert storage.read("vn/1") == b"root"
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/c.arrow": b"c"}, "vn/1", b"other")
    assert storage.read("vn/1") == b"root"
    assert not [f for f in os.listdir(tmp_path / "c" / "vn") if f.startswith(".tmp-")]


@pytest.mark.parametrize("option", ["host_turns", "host_dir"])
def test_removed_host_options_are_refused_by_name(option: str) -> None:
    """The options of the removed host machinery are an error that says so (a user who
    passed them learns that writers keep no state on their host), never silently kept."""
    with pytest.raises(InvalidArgumentError, match=f"storage option {option} was removed"):
        Storage("memory://x", {option: "/tmp/anywhere"})
