"""The REST catalogs ``olympia serve`` is measured against (issue 46), installed and started
by the benchmark itself, each bound to 127.0.0.1:

- ``reference``: Apache Iceberg's reference REST catalog (the ``iceberg-open-api`` 1.11.0 test
  fixtures: a JDBC catalog on SQLite behind ``RESTCatalogServlet``), through
  ``benchmarks/peers/src/.../LoopbackRestServer.java`` (the stock ``RESTCatalogServer``
  listens on every interface);
- ``nessie``: Project Nessie 0.99.0 with its RocksDB version store, on a JDK 21 or newer, its
  warehouse on an S3 server (SeaweedFS with identities on: Nessie's AWS SDK signs uploads in
  chunks, which SeaweedFS refuses when it accepts any key).

Maven fetches them (``benchmarks/peers/pom.xml``, and Nessie's runner jar) into
``.venv/peers`` on first use. ``python -m benchmarks.peers`` installs both and checks that
each serves pyiceberg's ``RestCatalog`` (namespace, table, append, scan).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, workdir

PEERS = ROOT / "benchmarks" / "peers"
CACHE = ROOT / ".venv" / "peers"
NESSIE = "org.projectnessie.nessie:nessie-quarkus:0.99.0:jar:runner"
NESSIE_JAR = CACHE / "nessie" / "nessie-quarkus-0.99.0-runner.jar"
STARTUP_S = 180.0


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def install() -> None:
    """Fetch both peers with Maven and compile the reference server's launcher (once)."""
    jars, classes = CACHE / "jars", CACHE / "classes"
    if not (CACHE / "jars.done").exists():
        _run("mvn", "-q", "-B", "-f", str(PEERS / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={jars}")
        (CACHE / "jars.done").touch()
    launcher = next(PEERS.glob("src/**/LoopbackRestServer.java"))
    built = classes / "org" / "apache" / "iceberg" / "rest" / "LoopbackRestServer.class"
    if not built.exists() or built.stat().st_mtime < launcher.stat().st_mtime:
        _run("javac", "-d", str(classes), "-cp", _classpath(), str(launcher))
    if not NESSIE_JAR.exists():
        _run("mvn", "-q", "-B", "dependency:copy", f"-Dartifact={NESSIE}",
             f"-DoutputDirectory={NESSIE_JAR.parent}")


def _classpath() -> str:
    return os.pathsep.join([str(CACHE / "classes"),
                            *sorted(str(p) for p in (CACHE / "jars").glob("*.jar"))])


def java_at_least(major: int) -> str:
    """A ``java`` of that major version or newer: the one on PATH, else a JDK under
    /usr/lib/jvm (the newest)."""
    candidates = ["java", *sorted((str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java")),
                                  reverse=True)]
    for java in candidates:
        try:
            out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
        except OSError:
            continue
        found = re.search(r'version "(\d+)', out)
        if found and int(found.group(1)) >= major:
            return java
    raise RuntimeError(f"no Java {major} or newer on PATH or under /usr/lib/jvm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Peer:
    """A running peer: its REST ``uri``, the properties pyiceberg's ``RestCatalog`` needs,
    and its process (a session of its own: stopped by its PID's group)."""

    name: str
    uri: str
    properties: dict[str, str]
    process: subprocess.Popen[bytes]

    def catalog(self) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(self.name, **{"uri": self.uri, **self.properties})


@contextlib.contextmanager
def _serving(name: str, cmd: list[str], env: dict[str, str], uri: str, config_url: str,
             properties: dict[str, str], log: Path) -> Iterator[Peer]:
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(config_url, timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start in {STARTUP_S:.0f} s; see {log}")
            time.sleep(0.5)
        yield Peer(name, uri, properties, process)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def reference(workdir: Path) -> Iterator[Peer]:
    """Iceberg's reference REST catalog: JDBC on SQLite, warehouse on local disk."""
    install()
    port = free_port()
    warehouse = workdir / "reference-warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CATALOG_URI": f"jdbc:sqlite:file:{workdir / 'reference.db'}",
           "CATALOG_WAREHOUSE": str(warehouse)}
    uri = f"http://127.0.0.1:{port}"
    with _serving("reference", [java_at_least(17), "-cp", _classpath(),
                                "org.apache.iceberg.rest.LoopbackRestServer", "127.0.0.1",
                                str(port)],
                  env, uri, f"{uri}/v1/config", {}, workdir / "reference.log") as peer:
        yield peer


@contextlib.contextmanager
def nessie(workdir: Path, s3: Any, prefix: str = "nessie") -> Iterator[Peer]:
    """Project Nessie (RocksDB) with its warehouse ``s3://<bucket>/<prefix>`` on ``s3`` (a
    ``SeaweedS3Server`` started with identities)."""
    install()
    port, management = free_port(), free_port()
    key, secret = s3.storage_options["key"], s3.storage_options["secret"]
    settings = {
        "quarkus.http.host": "127.0.0.1", "quarkus.http.port": port,
        "quarkus.management.host": "127.0.0.1", "quarkus.management.port": management,
        "quarkus.log.level": "WARN",
        "nessie.version.store.type": "ROCKSDB",
        "nessie.version.store.persist.rocks.database-path": workdir / "nessie-rocksdb",
        "nessie.catalog.default-warehouse": "bench",
        "nessie.catalog.warehouses.bench.location": f"s3://{s3.bucket}/{prefix}",
        "nessie.catalog.service.s3.default-options.endpoint": s3.endpoint_url,
        "nessie.catalog.service.s3.default-options.path-style-access": "true",
        "nessie.catalog.service.s3.default-options.region": "us-east-1",
        "nessie.catalog.service.s3.default-options.access-key":
            "urn:nessie-secret:quarkus:bench.s3",
        "bench.s3.name": key, "bench.s3.secret": secret,
    }
    uri = f"http://127.0.0.1:{port}/iceberg"
    client = {"warehouse": "bench", "s3.endpoint": s3.endpoint_url, "s3.region": "us-east-1",
              "s3.access-key-id": key, "s3.secret-access-key": secret,
              "s3.path-style-access": "true"}
    with _serving("nessie", [java_at_least(21), *(f"-D{k}={v}" for k, v in settings.items()),
                             "-jar", str(NESSIE_JAR)],
                  dict(os.environ), uri, f"{uri}/v1/config", client,
                  workdir / "nessie.log") as peer:
        yield peer


def _check(peer: Peer) -> dict[str, Any]:
    import pyarrow as pa

    catalog = peer.catalog()
    catalog.create_namespace("peer_check")
    table = catalog.create_table("peer_check.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    rows = catalog.load_table("peer_check.t").scan().to_arrow().num_rows
    return {"peer": peer.name, "tables": catalog.list_tables("peer_check"), "rows": rows}


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from s3server import SeaweedS3Server

    results = []
    with workdir() as work:
        with reference(work) as peer:
            results.append(_check(peer))
        with SeaweedS3Server(identities=True) as s3, nessie(work, s3) as peer:
            results.append(_check(peer))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
