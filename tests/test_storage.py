"""Storage: operation counts (misses and failures too) and bulk deletes that S3 answers with
per-key errors (a SeaweedFS server whose DeleteObjects answers are doctored per key)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Location
from s3server import Fault, FaultProxy

from olympia import Catalog
from olympia.catalog.keys import version_path
from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    InvalidArgumentError,
    PartialDeleteError,
    StorageError,
    TransientStorageError,
)
from olympia.expire.reachability import delete_paths
from olympia.storage import FileInfo, Storage, backends, classify


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
        self.remote, self.shared_turns = inner.remote, inner.shared_turns
        self.error = error or PermissionError(f"access denied: {path}")

    def read(self, path: str) -> bytes:
        if path == self.path:
            raise self.error
        data: bytes = self.inner.read(path)
        return data

    def write(self, path: str, data: bytes, durable: bool = True) -> None:
        self.inner.write(path, data, durable)

    def create_exclusive(self, path: str, data: bytes) -> None:
        self.inner.create_exclusive(path, data)

    def stage(self, path: str) -> None:
        return None

    def hold_turn(self, path: str, wait: bool = True) -> Any:
        return self.inner.hold_turn(path, wait)

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
])
def test_classify_builtin_errors(error: Exception, kind: type) -> None:
    assert classify(error) is kind


def test_classify_bulk_delete_codes() -> None:
    assert classify("SlowDown: Please reduce your request rate.") is TransientStorageError
    assert classify("InternalError: 503 in the message") is TransientStorageError
    assert classify("AccessDenied: node/1b503c7e.arrow") is StorageError


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
    from olympia.storage import SCHEMES, FsspecBackend, LocalBackend, MemoryBackend

    assert {k: v.__name__ for k, v in SCHEMES.items()} == {
        "": "_open_local", "file": "_open_local", "local": "_open_local",
        "memory": "_open_memory", "s3": "_open_s3", "s3a": "_open_s3"}
    local = Storage(str(tmp_path / "a"))
    assert isinstance(local.backend, LocalBackend)
    assert local.uri == f"file://{tmp_path}/a"
    assert isinstance(Storage("memory://x").backend, MemoryBackend)
    assert isinstance(Storage("s3://bucket/p", {"endpoint_url": "http://127.0.0.1:1"}).backend,
                      FsspecBackend)
    with pytest.raises(StorageError, match="unsupported storage scheme 'gs'"):
        Storage("gs://bucket/p")


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


def test_local_sync_and_early_loss(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local disk syncs every file but vn/latest (a hint that discovery checks), and an
    exclusive create of a file that exists fails before writing or syncing anything."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    catalog = Catalog.create(str(tmp_path / "c"))
    synced.clear()
    catalog.files.write_hint("vn/latest", 0)
    assert synced == []
    catalog.files.write_hint("vn/oldest", 0)
    assert len(synced) == 1
    synced.clear()
    catalog.storage.stats.reset()
    catalog.create_namespace("a")  # its definition, the nodes, the root, then vn/latest
    assert len(synced) == catalog.storage.stats.writes - 1 >= 2
    synced.clear()
    before = sorted(os.listdir(tmp_path / "c" / "vn"))
    with pytest.raises(FileAlreadyExists):
        catalog.storage.create_exclusive(version_path(1), b"other")
    assert synced == [] and sorted(os.listdir(tmp_path / "c" / "vn")) == before


def test_small_reads_stay_on_the_calling_thread_unless_remote(location: Location) -> None:
    """A batch of reads runs on the calling thread where reads need no round trip, on the
    I/O threads (concurrently) on S3; the results keep their order either way."""
    storage = Storage(location.uri, location.storage_options)
    storage.write_many({f"f{i}": bytes([i]) for i in range(4)})
    threads: set[str] = set()

    def read(path: str) -> bytes:
        threads.add(threading.current_thread().name)
        return storage.read(path)

    assert storage.map_reads(read, [f"f{i}" for i in (3, 1, 2)]) == [b"\x03", b"\x01", b"\x02"]
    remote = location.uri.startswith("s3://")
    assert storage.backend.remote is remote
    assert (threads == {threading.current_thread().name}) is not remote
    storage.write("vn/0", b"x")
    assert storage.known_to_exist("vn/0") is not remote and not storage.known_to_exist("vn/1")


_UNNAMED = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
needs_unnamed_files = pytest.mark.skipif(
    not _UNNAMED, reason="unnamed files need Linux O_TMPFILE and /proc")


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
    """publish() writes the files, then creates the named one exclusively, and says when
    the files are in place; a lost race leaves the existing file as it was. On local disk
    the loss is found in the writer's turn, before any file is written; elsewhere the
    files are written first."""
    storage = Storage(location.uri, location.storage_options)
    noted: list[str] = []
    storage.publish({"node/a.arrow": b"a", "def/b.binpb": b"b"}, "vn/1", b"root",
                    written=lambda: noted.append(str(storage.exists("vn/1"))))
    assert [storage.read(p) for p in ("node/a.arrow", "def/b.binpb", "vn/1")] == [
        b"a", b"b", b"root"]
    assert noted == ["False"]  # called once, before the root was created
    noted.clear()
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/c.arrow": b"c"}, "vn/1", b"other",
                        written=lambda: noted.append("c"))
    assert storage.read("vn/1") == b"root"
    assert [f.path for f in storage.list("vn/")] == ["vn/1"]
    assert bool(noted) == storage.exists("node/c.arrow")
    assert bool(noted) == (location.kind != "local" or not _UNNAMED)


@needs_unnamed_files
def test_local_publish_stages_the_content_and_names_it_last(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On local disk every file is written unnamed, then all are written back (a refusal
    only leaves the syncs more to do), then synced, then named, the published one last;
    no temp file is named."""
    storage = Storage(str(tmp_path / "c"))
    storage.write("vn/.keep", b"")  # the folders exist: every link below is a file's
    staged = _without_named_temps(monkeypatch)
    steps: list[str] = []
    real_link, real_fsync = os.link, os.fsync
    monkeypatch.setattr(backends, "_SYNC_FILE_RANGE",
                        lambda fd, offset, length, flags: (steps.append("write-back"), -1)[1])

    def linking(src: str, dst: str, **kwargs: Any) -> None:
        real_link(src, dst, **kwargs)
        steps.append(os.path.relpath(dst, tmp_path / "c"))

    def syncing(fd: int) -> None:
        real_fsync(fd)
        steps.append("sync")

    monkeypatch.setattr(os, "link", linking)
    monkeypatch.setattr(os, "fsync", syncing)
    storage.publish({"node/a.arrow": b"a", "node/b.arrow": b"b"}, "vn/1", b"root")
    assert steps == (["write-back"] * 3 + ["sync"] * 3
                     + ["node/a.arrow", "node/b.arrow", "vn/1"])
    assert staged == [] and storage.read("vn/1") == b"root"
    assert storage.stats.writes == 4  # .keep, and the three published


@needs_unnamed_files
def test_local_publish_creates_the_file_whole_where_naming_staged_content_is_refused(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = Storage(str(tmp_path / "c"))
    real_link = os.link

    def linking(src: str, dst: str, **kwargs: Any) -> None:
        if src.startswith("/proc/") and "/vn/" in dst:
            raise OSError(errno.EXDEV, "cross-device link", src)
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", linking)
    staged = _without_named_temps(monkeypatch)
    storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
    assert storage.read("vn/1") == b"root" and storage.read("node/a.arrow") == b"a"
    assert staged == [str(tmp_path / "c" / "vn" / "1")]  # created whole, once
    assert storage.stats.writes == 2
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/b.arrow": b"b"}, "vn/1", b"other")
    assert storage.read("vn/1") == b"root"
    assert not [f for f in os.listdir(tmp_path / "c" / "vn") if f.startswith(".tmp-")]


@needs_unnamed_files
def test_local_unnamed_files_of_a_lost_publish_hold_the_next_files(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish that loses its race keeps its unnamed files open (closing one frees an
    inode, which ext4 without a journal makes every later allocation scan past) and
    the next publish in those folders writes into them: no new unnamed file, the old
    content replaced whole. A forked child closes its copies and opens its own."""
    storage = Storage(str(tmp_path / "c"))
    storage.publish({"node/a.arrow": b"a" * 5000}, "vn/1", b"root")
    opened: list[str] = []
    real_open = os.open

    def opening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            opened.append(os.path.relpath(path, tmp_path / "c"))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/b.arrow": b"b" * 5000}, "vn/1", b"lost root")
    assert opened == ["node", "vn"] and not storage.exists("node/b.arrow")
    storage.publish({"node/c.arrow": b"c"}, "vn/2", b"2")
    assert opened == ["node", "vn"]  # both written into the lost attempt's files
    assert storage.read("node/c.arrow") == b"c" and storage.read("vn/2") == b"2"
    assert storage.read("vn/1") == b"root"
    with pytest.raises(FileAlreadyExists):
        storage.publish({"node/d.arrow": b"d"}, "vn/2", b"lost")
    assert len(opened) == 4  # the last ones were named: this attempt opened its own
    child = os.fork()
    if child == 0:  # the child: its own unnamed files, never the parent's inodes
        code = 1
        try:
            storage.publish({"node/e.arrow": b"e"}, "vn/3", b"3")
            code = 0 if opened[4:] == ["node", "vn"] else 2
        finally:
            os._exit(code)
    assert os.waitpid(child, 0)[1] == 0
    storage.publish({"node/f.arrow": b"f"}, "vn/4", b"4")
    assert len(opened) == 4  # the parent still writes into its own
    assert [storage.read(p) for p in ("node/e.arrow", "vn/3", "node/f.arrow", "vn/4")] == [
        b"e", b"3", b"f", b"4"]


def _hold_turn(folder: Any) -> int:
    """Take the local writers' turn on ``folder`` (as another writer would) and keep it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@needs_unnamed_files
def test_local_publish_syncs_and_names_in_its_turn(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are synced and named while the writer holds the turn on the folder of
    the file that decides the race: another writer cannot take it meanwhile."""
    storage = Storage(str(tmp_path / "c"))
    storage.write("vn/.keep", b"")
    real_fsync = os.fsync
    taken: list[bool] = []

    def syncing(fd: int) -> None:
        real_fsync(fd)
        try:
            os.close(_hold_turn(tmp_path / "c" / "vn"))
            taken.append(True)
        except BlockingIOError:
            taken.append(False)

    monkeypatch.setattr(os, "fsync", syncing)
    storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
    assert taken == [False, False] and storage.read("vn/1") == b"root"


@needs_unnamed_files
def test_a_local_writer_that_lost_while_waiting_for_its_turn_writes_nothing(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer whose turn is taken looks for the name while it waits: when another
    writer has created it, it gives up its staged files unsynced and unnamed."""
    storage = Storage(str(tmp_path / "c"))
    storage.create_exclusive("vn/1", b"theirs")
    holder = _hold_turn(tmp_path / "c" / "vn")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    noted: list[str] = []
    try:
        with pytest.raises(FileAlreadyExists):
            storage.publish({"node/a.arrow": b"a", "def/b.binpb": b"b"}, "vn/1", b"ours",
                            written=lambda: noted.append("written"))
    finally:
        os.close(holder)
    assert synced == [] and noted == [] and storage.read("vn/1") == b"theirs"
    assert [f.path for f in storage.list("")] == ["vn/1"]


@needs_unnamed_files
def test_a_local_writer_goes_on_without_a_turn_held_too_long(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn only saves work: a writer whose turn is held past the longest wait (its
    holder stalled) goes on, and the exclusive link alone decides."""

    monkeypatch.setattr(backends, "TURN_WAIT_S", 0.01)
    storage = Storage(str(tmp_path / "c"))
    storage.write("vn/.keep", b"")
    holder = _hold_turn(tmp_path / "c" / "vn")
    try:
        storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
        with pytest.raises(FileAlreadyExists):
            storage.publish({"node/b.arrow": b"b"}, "vn/1", b"other")
    finally:
        os.close(holder)
    assert storage.read("vn/1") == b"root" and storage.read("node/a.arrow") == b"a"


@needs_unnamed_files
def test_local_publish_without_advisory_locks(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that refuses advisory locks is asked once; publishing goes on."""
    asked: list[int] = []

    def refusing(fd: int, operation: int) -> None:
        asked.append(fd)
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(fcntl, "flock", refusing)
    storage = Storage(str(tmp_path / "c"))
    storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
    storage.publish({"node/b.arrow": b"b"}, "vn/2", b"root 2")
    assert len(asked) == 1 and storage.read("vn/2") == b"root 2"


@needs_unnamed_files
def test_a_held_turn_keeps_other_writers_out_and_serves_its_own_publishes(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a thread holds the turn (``hold_turn``), no other writer can take it, whether
    or not the file appears meanwhile; that thread's own publishes name their files in it
    without waiting for it; it ends with the block."""
    from olympia.storage.backends import LocalBackend

    storage = Storage(str(tmp_path / "c"))
    storage.write("vn/.keep", b"")
    real_take = LocalBackend._take_turn
    taken: list[bool] = []
    monkeypatch.setattr(LocalBackend, "_take_turn",
                        lambda self, *a, **k: taken.append(True) or real_take(self, *a, **k))

    def others_can_take_it() -> bool:
        try:
            os.close(_hold_turn(tmp_path / "c" / "vn"))
            return True
        except BlockingIOError:
            return False

    with storage.hold_turn("vn/1") as held:
        assert held and not others_can_take_it()
        storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
        with storage.hold_turn("vn/2") as again:  # the same folder: already held
            assert again
        assert not others_can_take_it() and taken == [True]
    assert others_can_take_it() and storage.read("vn/1") == b"root"


def test_a_turn_is_held_on_local_disk_and_on_this_host_for_s3(location: Location) -> None:
    """Local disk has turns on the folder; S3 has host turns (this host's writers); memory
    has none: holding one yields False and changes nothing."""
    storage = Storage(location.uri, location.storage_options)
    storage.write("vn/0", b"root 0")  # a catalog's folder of roots
    with storage.hold_turn("vn/1", "catalog-id") as held:
        storage.publish({"node/a.arrow": b"a"}, "vn/1", b"root")
    assert held == (location.kind != "memory") and storage.read("vn/1") == b"root"
    assert storage.host_turns == (location.kind == "s3")


@pytest.mark.s3
def test_a_host_turns_holder_copies_what_it_published_for_this_hosts_writers(
        s3_server: Any, tmp_path: Any) -> None:
    """What a host turn's holder published is known to exist and read from this host's
    copies by the writers of the catalog here (no request), not by another host's, nor
    for another catalog (scope) at the same place."""
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"

    def opened(host: str) -> Storage:
        return Storage(uri, {**s3_server.storage_options, "host_dir": str(tmp_path / host)})

    holder, neighbour, elsewhere = opened("a"), opened("a"), opened("b")
    with holder.hold_turn("vn/1", "catalog-1") as held:
        holder.publish({"node/a.arrow": b"node"}, "vn/1", b"root 1")
    assert held
    with neighbour.hold_turn("vn/2", "catalog-1"):  # this process has met the catalog
        pass
    neighbour.stats.reset()
    assert neighbour.known_to_exist("vn/1") and neighbour.known_to_exist("node/a.arrow")
    assert neighbour.read("vn/1") == b"root 1" and neighbour.probe("vn/1")
    assert neighbour.stats.snapshot()["reads"] == 0
    assert neighbour.stats.snapshot()["exists"] == 0
    assert neighbour.stats.snapshot()["host_reads"] == 1
    assert not neighbour.known_to_exist("vn/2")  # never published here: not known
    with elsewhere.hold_turn("vn/2", "catalog-1"):
        assert not elsewhere.known_to_exist("vn/1")
    other_catalog = opened("a")
    with other_catalog.hold_turn("vn/2", "catalog-2"):
        assert not other_catalog.known_to_exist("vn/1")
    assert elsewhere.read("vn/1") == b"root 1" and elsewhere.stats.snapshot()["reads"] == 1


@pytest.mark.s3
def test_a_torn_host_copy_is_read_from_the_store(s3_server: Any, tmp_path: Any) -> None:
    """A copy whose digest does not match (a crash tore it) is removed and the store read."""
    uri = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    storage = Storage(uri, {**s3_server.storage_options, "host_dir": str(tmp_path)})
    with storage.hold_turn("vn/1", "c"):
        storage.publish({}, "vn/1", b"root 1")
    copies = [p for p in tmp_path.rglob("*") if p.is_file() and len(p.name) == 40]
    assert len(copies) == 1
    copies[0].write_bytes(copies[0].read_bytes()[:-1] + b"?")
    storage.stats.reset()
    assert storage.read("vn/1") == b"root 1" and storage.stats.snapshot()["reads"] == 1
    assert not copies[0].exists()


def test_host_turns_exclude_one_another_and_end_with_the_block(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One holder per catalog on a host; another catalog's turn is its own; a writer whose
    wait runs out goes on without the turn; a thread holding it holds it on."""
    from olympia.storage import host

    monkeypatch.setattr(host, "HOST_TURN_WAIT_S", 0.01)
    first, second = host.HostTurns(str(tmp_path), "c1"), host.HostTurns(str(tmp_path), "c1")
    other = host.HostTurns(str(tmp_path), "c2")
    outcome: list[bool] = []

    def try_second() -> None:
        with second.hold() as held:
            outcome.append(held)

    with first.hold() as held:
        assert held and first.held()
        with first.hold() as again:
            assert again
        waiter = threading.Thread(target=try_second)
        waiter.start()
        waiter.join()
        with other.hold() as others:
            assert others
    assert outcome == [False] and not first.held()
    _join_host_turn_waits()  # the wait that ran out lets go once it gets the lock
    with second.hold() as held:
        assert held


def _join_host_turn_waits() -> None:
    """Wait for the threads of host-turn waits that ran out (each ends once it got the lock
    and let it go)."""
    for thread in threading.enumerate():
        if thread.name == "olympia-host-turn":
            thread.join()


def test_host_notes_are_read_across_processes_torn_records_skipped_old_files_removed(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version's note, appended by one writer, is read by another (one read for all the
    notes since its last look); a record not complete yet is read once complete, a torn
    one (its digest does not match) is skipped once records follow it, one for a version
    nobody noted is None; a writer starting a notes file removes those before the
    previous one; a note over NOTE_MAX_BYTES is not written."""
    from olympia.storage import host

    monkeypatch.setattr(host, "NOTES_PER_FILE", 4)
    writer, reader = host.HostTurns(str(tmp_path), "c1"), host.HostTurns(str(tmp_path), "c1")
    assert reader.noted(1) is None
    writer.note(1, b"one")
    writer.note(2, b"two")
    assert reader.noted(1) == b"one" and reader.noted(2) == b"two"
    assert host.HostTurns(str(tmp_path), "c2").noted(1) is None  # another catalog's
    notes = os.path.join(writer.folder, f"n-{0:032x}")
    head = host._NOTE_HEAD.pack(3, 5)
    record = head + b"three" + hashlib.sha256(head + b"three").digest()
    with open(notes, "ab") as f:
        f.write(record[:10])  # being appended
    assert reader.noted(3) is None
    with open(notes, "ab") as f:
        f.write(record[10:])
    assert reader.noted(3) == b"three"
    torn = host._NOTE_HEAD.pack(4, 4) + b"four" + b"\0" * 32
    with open(notes, "ab") as f:
        f.write(torn)
    assert reader.noted(4) is None
    writer.note(5, b"five")  # the next file
    writer.note(4, b"late")
    assert reader.noted(4) == b"late" and reader.noted(5) == b"five"
    monkeypatch.setattr(host, "NOTE_MAX_BYTES", 8)
    writer.note(9, b"nine")  # starts file 2: file 0 goes
    writer.note(10, b"x" * 9)
    assert not os.path.exists(notes)
    assert host.HostTurns(str(tmp_path), "c1").noted(9) == b"nine"
    assert host.HostTurns(str(tmp_path), "c1").noted(10) is None
    assert host.HostTurns(str(tmp_path), "c1").noted(5) == b"five"  # file 1 is kept


def test_host_copies_are_bounded_and_kept_only_in_a_folder_of_ones_own(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies beyond COPIES_KEPT are pruned, oldest first, when a process looks (every
    PRUNE_EVERY puts); catalogs' folders beyond CATALOGS_KEPT go, least recently used
    first, and nothing else in the base folder (which ``host_dir`` may name) is touched; a
    base folder others may write is never used."""
    from olympia.storage import host

    monkeypatch.setattr(host, "COPIES_KEPT", 4)
    monkeypatch.setattr(host, "PRUNE_EVERY", 3)
    monkeypatch.setattr(host, "CATALOGS_KEPT", 2)
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    turns = host.HostTurns(str(base), "c1")
    (base / "notes.txt").write_text("the user's")  # not a copy: never pruned
    for i in range(5):
        turns.put({f"node/{i}.arrow": b"x"})
        os.utime(turns._copy(f"node/{i}.arrow"), ns=(i, i))  # distinct ages
    assert all(turns.has(f"node/{i}.arrow") for i in range(5))  # not looked since the 3rd
    turns.put({"node/5.arrow": b"x"})  # the 6th put looks: 6 copies, the 4 oldest go
    assert [turns.has(f"node/{i}.arrow") for i in range(6)] == [False] * 4 + [True] * 2
    with turns.hold():
        pass
    os.utime(turns.folder, ns=(0, 0))  # the least recently used catalog
    theirs = base / ("0" * 32)  # named like one, but no turn file: not ours
    theirs.mkdir()
    os.utime(theirs, ns=(0, 0))
    for key in ("c2", "c3"):
        with host.HostTurns(str(base), key).hold():
            pass
    assert not os.path.exists(turns.folder)  # c1's folder, the oldest, went
    assert sorted(p.name for p in base.iterdir() if p.name != theirs.name and (
        p.is_dir())) == sorted(os.path.basename(host.HostTurns(str(base), k).folder)
                               for k in ("c2", "c3"))
    assert theirs.exists() and (base / "notes.txt").exists()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    loose = host.HostTurns(str(shared), "c1")
    loose.put({"vn/1": b"r"})
    with loose.hold() as held:
        assert not held and not loose.has("vn/1")
    assert list(shared.iterdir()) == []


@pytest.mark.parametrize("options", [{"host_turns": "sometimes"}, {"host_dir": "relative"},
                                     {"host_dir": 7}])
def test_host_turn_options_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="host_"):
        Storage("memory://x", options)


@pytest.mark.s3
def test_host_turns_can_be_turned_off(s3_server: Any) -> None:
    storage = Storage(f"s3://{s3_server.bucket}/off", {**s3_server.storage_options,
                                                        "host_turns": "false"})
    assert not storage.host_turns
    with storage.hold_turn("vn/1", "c") as held:
        assert not held


HELD_ACROSS_FORK = """
import fcntl, os, sys
from olympia.storage import Storage

storage = Storage(sys.argv[1])
storage.write("vn/.keep", b"")
read_end, write_end = os.pipe()
ready_read, ready_write = os.pipe()
if sys.argv[2] == "host":
    from olympia.storage.host import HostTurns
    host = HostTurns(sys.argv[1] + "-host", "catalog")
    turn, holding, locked = host.hold(), host.held, os.path.join(host.folder, "turn")
else:
    turn = storage.hold_turn("vn/1") if sys.argv[2] == "hold" else storage.backend.turn(
        storage.full("vn/1"))
    holding = lambda: storage.backend._holding(storage.full("vn/1"))
    locked = storage.full("vn")
with turn:
    child = os.fork()
    if child == 0:  # runs (its fork handlers done) until the parent has looked
        os.write(ready_write, b"h" if holding() else b"r")
        os.read(read_end, 1)
        os._exit(0)
child_holds = os.read(ready_read, 1) == b"h"
other = os.open(locked, os.O_RDONLY)
try:
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("believed held by the child" if child_holds else "free")
except BlockingIOError:
    print("held by the child")
os.write(write_end, b"x")
os.waitpid(child, 0)
"""


@needs_unnamed_files
@pytest.mark.parametrize("kind", ["turn", "hold", "host"])
def test_a_turn_ends_with_its_holder_when_the_process_forked_meanwhile(
        tmp_path: Any, kind: str) -> None:
    """A child forked while a thread holds a turn (to name files, held for a whole
    attempt, or a host turn) neither keeps the lock nor believes it holds it: the parent's
    turn ends when the parent is done, however long the child runs."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HELD_ACROSS_FORK, str(tmp_path / "c"), kind],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "free"


def test_a_host_turns_folder_removed_meanwhile_is_made_again(tmp_path: Any) -> None:
    """Another process may prune a catalog's folder (CATALOGS_KEPT) while this one uses it:
    the turn then goes on without it once, and the next is taken in a new folder."""
    import shutil

    from olympia.storage import host

    turns = host.HostTurns(str(tmp_path), "c1")
    with turns.hold() as held:
        assert held
    shutil.rmtree(turns.folder)
    with turns.hold() as held:
        assert not held
    with turns.hold() as held:
        assert held
    turns.put({"vn/1": b"r"})
    assert turns.get("vn/1") == b"r"


def _held_elsewhere(turns: Any) -> int:
    """A descriptor holding ``turns``' lock, as another process's writer would."""
    holder = os.open(os.path.join(turns.folder, "turn"), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return holder


def _hold_on_a_thread(turns: Any) -> tuple[threading.Thread, list[bool]]:
    """A started thread taking ``turns``, and where it records whether it held it."""
    outcome: list[bool] = []

    def wait() -> None:
        with turns.hold() as held:
            outcome.append(held)

    waiter = threading.Thread(target=wait)
    waiter.start()
    return waiter, outcome


def test_a_host_turn_is_awaited_in_the_kernel_and_a_wait_that_ran_out_lets_go(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer whose turn is held waits on a thread of its own (flock has no timeout) and
    takes the turn when the holder lets go; a wait that ran out leaves its thread behind,
    which lets the lock go once it gets it; with STALLED_WAITS_MAX such waits left, writers
    go on without waiting."""
    from olympia.storage import host

    turns = host.HostTurns(str(tmp_path), "c1")
    with turns.hold():  # makes the folder and the turn file
        pass
    holder = _held_elsewhere(turns)
    monkeypatch.setattr(host, "HOST_TURN_WAIT_S", 600.0)
    waiter, outcome = _hold_on_a_thread(turns)
    while not any(t.name == "olympia-host-turn" for t in threading.enumerate()):
        time.sleep(0.001)  # until the writer waits on its thread
    os.close(holder)  # the holder lets go
    waiter.join()
    assert outcome == [True]

    holder = os.open(os.path.join(turns.folder, "turn"), os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    monkeypatch.setattr(host, "HOST_TURN_WAIT_S", 0.0)
    monkeypatch.setattr(host, "STALLED_WAITS_MAX", 1)
    with turns.hold() as held:  # runs out at once: its thread is left behind
        assert not held
    with turns.hold() as held:  # one wait is left already: this writer does not wait
        assert not held
    assert [t.name for t in threading.enumerate()].count("olympia-host-turn") == 1
    os.close(holder)
    _join_host_turn_waits()
    assert host._Wait._left == 0
    free = os.open(os.path.join(turns.folder, "turn"), os.O_RDONLY)
    try:  # the thread let the lock go
        fcntl.flock(free, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(free)


def test_a_writer_waiting_long_for_the_host_turn_goes_first(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a writer that has waited HOST_TURN_URGENT_S holds the urgent lock, newcomers
    do not take the turn even when it is free; once it lets go they do. A writer past the
    bound takes the urgent lock while it waits, and lets it go once it has the turn."""
    from olympia.storage import host

    monkeypatch.setattr(host, "HOST_TURN_WAIT_S", 0.01)
    turns = host.HostTurns(str(tmp_path), "c1")
    with turns.hold():  # makes the folder and the turn file
        pass
    urgent = os.path.join(turns.folder, "urgent")
    waiting = os.open(urgent, os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(waiting, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another writer, urgent
        with turns.hold() as held:
            assert not held  # the turn is free, but goes to the urgent writer first
    finally:
        os.close(waiting)
    _join_host_turn_waits()
    with turns.hold() as held:
        assert held

    holder = _held_elsewhere(turns)
    monkeypatch.setattr(host, "HOST_TURN_WAIT_S", 600.0)
    monkeypatch.setattr(host, "HOST_TURN_URGENT_S", 0.0)
    waiter, outcome = _hold_on_a_thread(turns)
    probe = os.open(urgent, os.O_RDONLY)
    try:
        while True:  # until the waiter, urgent at once, holds the urgent lock
            try:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                break
            fcntl.flock(probe, fcntl.LOCK_UN)
            time.sleep(0.001)
        os.close(holder)  # the holder lets go: the urgent writer takes the turn
        waiter.join()
        assert outcome == [True]
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and let the urgent lock go
    finally:
        os.close(probe)
