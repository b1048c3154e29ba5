"""`olympia serve` for tests: the real command in a subprocess on a free 127.0.0.1 port.

The server binds port 0 and prints its address once it listens (connections queue from
then on), so no port is picked in advance and nothing is polled. Its log is kept for the
tests that read it; it is stopped by the PID recorded at start: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import duckdb
import duckdb_ext
from pyiceberg.catalog.rest import RestCatalog

from olympia.catalog.catalog import Catalog as OlympiaStore

STOP_GRACE = 10.0
DUCKDB_EXTENSIONS = Path(next(iter(duckdb_ext.__path__))) / "extensions"
_ADDRESS = re.compile(r" at (http://127\.0\.0\.1:\d+)$")


class RestServer:
    """``olympia serve`` over the Olympia catalog at ``catalog_uri``.

    Args:
        catalog_uri: The Olympia catalog (it must exist).
        warehouse: Where tables live.
        storage_options: The server's own storage options (passed as OLYMPIA_STORAGE_OPTIONS).
        extra: More command-line arguments.
        file_size_limit: The largest file the server process may write (its
            ``RLIMIT_FSIZE``: a write past it fails with ``EFBIG``, as on a file system
            whose files cannot grow that large; Python ignores ``SIGXFSZ``).
    """

    def __init__(self, catalog_uri: str, warehouse: str,
                 storage_options: dict[str, Any] | None = None,
                 extra: tuple[str, ...] = (), file_size_limit: int | None = None) -> None:
        self.catalog_uri = catalog_uri
        self.warehouse = warehouse
        self.storage_options = storage_options or {}
        self.extra = extra
        self.file_size_limit = file_size_limit
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.log: list[str] = []
        self._drain: threading.Thread | None = None

    @classmethod
    def on_new_catalog(cls, root: Path, *extra: str) -> RestServer:
        """A server (not started) over a new Olympia catalog at ``root/catalog`` whose
        tables live under ``root/warehouse``."""
        OlympiaStore.create(str(root / "catalog")).close()
        return cls(str(root / "catalog"), f"file://{root}/warehouse", extra=extra)

    def start(self) -> RestServer:
        assert self.process is None, "started twice: the first server would outlive stop()"
        env = {**os.environ, "OLYMPIA_STORAGE_OPTIONS": json.dumps(self.storage_options)}
        cmd = [str(Path(sys.executable).parent / "olympia"), "serve", "-c", self.catalog_uri,
               "--warehouse", self.warehouse, "--port", "0", *self.extra]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, text=True, env=env)
        if self.file_size_limit is not None:  # before it serves: it writes nothing until then
            limit = self.file_size_limit
            resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (limit, limit))
        assert self.process.stdout is not None
        for line in self.process.stdout:  # the address line comes before anything is served
            self.log.append(line)
            found = _ADDRESS.search(line.rstrip())
            if found:
                self.url = found.group(1)
                break
        if not self.url:
            self.stop()
            raise RuntimeError("olympia serve did not start:\n" + "".join(self.log))
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        return self

    def _read_log(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line)

    def client(self, name: str = "rest", **properties: str) -> RestCatalog:
        """A pyiceberg RestCatalog of this server (``warehouse`` defaults to the server's)."""
        return RestCatalog(name, **{"uri": self.url, "warehouse": self.warehouse,
                                    **properties})

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._drain is not None:
            self._drain.join(timeout=STOP_GRACE)

    def __enter__(self) -> RestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def version(server: RestServer) -> int:
    """The catalog's latest version, read by the library (not through the server)."""
    store = OlympiaStore.open(server.catalog_uri, server.storage_options)
    try:
        return store.version
    finally:
        store.close()


def request(server: RestServer, method: str, path: str, body: bytes | str | None = None,
            headers: dict[str, str] | None = None, source: str | None = None,
            ) -> tuple[int, dict[str, str], Any]:
    """One HTTP request with ``path`` sent exactly as given (from the loopback address
    ``source``, if given): status, headers (names in lower case) and the JSON answer or
    None."""
    address = urlsplit(server.url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30,
                                      source_address=(source, 0) if source else None)
    try:
        data = body.encode() if isinstance(body, str) else body
        sent = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers={**sent, **(headers or {})})
        answer = conn.getresponse()
        raw = answer.read()
        return (answer.status, {k.lower(): v for k, v in answer.getheaders()},
                json.loads(raw) if raw else None)
    finally:
        conn.close()


def assert_error(answer: tuple[int, dict[str, str], Any], status: int, error_type: str,
                 words: str) -> None:
    """The answer is the specification's ErrorModel with this status, type and message."""
    code, _, body = answer
    assert code == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}
    assert body["error"]["code"] == status and body["error"]["type"] == error_type
    assert words in body["error"]["message"]
    assert "Traceback" not in body["error"]["message"]


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the iceberg, httpfs and avro extensions of the pinned
    ``duckdb-ext-*`` packages loaded (nothing is downloaded)."""
    con = duckdb.connect(config={"extension_directory": str(DUCKDB_EXTENSIONS),
                                 "autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for extension in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {extension}")
    return con
