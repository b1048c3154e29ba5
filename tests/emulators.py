"""Storage emulators for tests, each a real server on a free 127.0.0.1 port: fake-gcs-server
(Google Cloud Storage's JSON API) and Azurite (Azure Blob Storage). `make install` puts both
in the venv (docs: Makefile); a test that needs one is skipped only where its binary is
missing. Each runs in a session of its own and is stopped by its PID's process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

VENV = Path(sys.prefix)
STARTUP_TIMEOUT = 60.0
START_TRIES = 3  # a port picked free may be taken before the emulator binds it
#: Azurite's well-known development account.
AZURITE_ACCOUNT = "devstoreaccount1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Emulator:
    """One emulator process; subclasses say how to start it and how to ask if it serves."""

    name = ""
    binary = Path()

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def available(cls) -> bool:
        return cls.binary.is_file() and os.access(cls.binary, os.X_OK)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe(self) -> bool:
        """Whether the emulator answers (any HTTP status counts)."""
        try:
            urllib.request.urlopen(self.endpoint_url + self.probe_path, timeout=2).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    probe_path = "/"

    def start(self) -> Emulator:
        for attempt in range(1, START_TRIES + 1):
            self.port = _free_port()
            log = self.workdir / f"{self.name}-{attempt}.log"
            with log.open("wb") as out:
                self.process = subprocess.Popen(self.command(), stdout=out,
                                                stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True)
            deadline = time.monotonic() + STARTUP_TIMEOUT
            while time.monotonic() < deadline and self.process.poll() is None:
                if self.probe():
                    return self
                time.sleep(0.2)
            text = log.read_text(errors="replace")
            self._stop_process()
            if "address already in use" not in text.lower() or attempt == START_TRIES:
                raise RuntimeError(f"{self.name} did not start; log tail:\n{text[-3000:]}")
        raise AssertionError("unreachable")

    def _stop_process(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        self._stop_process()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeGcsServer(Emulator):
    """fake-gcs-server in memory, plain HTTP: the JSON API at ``endpoint_url``."""

    name = "fake-gcs-server"
    binary = VENV / "bin" / "fake-gcs-server"
    probe_path = "/storage/v1/b"

    def command(self) -> list[str]:
        return [str(self.binary), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1",
                "-port", str(self.port), "-public-host", f"127.0.0.1:{self.port}",
                "-log-level", "warn"]


class Azurite(Emulator):
    """Azurite's Blob service, its data under the work folder."""

    name = "azurite"
    binary = VENV / "npm" / "node_modules" / ".bin" / "azurite-blob"
    probe_path = f"/{AZURITE_ACCOUNT}?comp=list"

    def command(self) -> list[str]:
        return [str(self.binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--location", str(self.workdir / "data"), "--skipApiVersionCheck", "--silent"]



#: Azurite's well-known development account key (public, in Azure's documentation).
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def gcs_storage_options(gcs: FakeGcsServer) -> dict[str, str]:
    """Olympia storage options for a gs:// catalog on ``gcs`` (it takes any token)."""
    return {"endpoint_url": gcs.endpoint_url, "token": "emulator", "project": "test"}


def create_gcs_bucket(gcs: FakeGcsServer, name: str) -> None:
    request = urllib.request.Request(f"{gcs.endpoint_url}/storage/v1/b?project=test",
                                     data=f'{{"name": "{name}"}}'.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def azure_storage_options(azure: Azurite) -> dict[str, str]:
    """Olympia storage options for an abfs:// catalog on ``azure``."""
    return {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY,
            "endpoint_url": f"{azure.endpoint_url}/{AZURITE_ACCOUNT}"}


def create_azure_container(azure: Azurite, name: str) -> None:
    from azure.storage.blob import BlobServiceClient

    options = azure_storage_options(azure)
    BlobServiceClient(options["endpoint_url"], credential={
        "account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}).create_container(name)
