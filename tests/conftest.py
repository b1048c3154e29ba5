"""Shared fixtures: catalog locations on memory, local disk and a real S3 server."""

from __future__ import annotations

import logging
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")

# Property tests draw the same examples on every run (the suite must be deterministic);
# HYPOTHESIS_PROFILE=explore searches afresh (random examples, as hypothesis does by default).
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def synced_folder(fd: int, root: Path | str) -> str | None:
    """For tests that watch ``os.fsync``: the folder open at ``fd``, relative to ``root``
    (None: ``fd`` is a file's). Linux: the folder is named through /proc."""
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        return None
    return os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), root)


@dataclass
class Location:
    """Where a test catalog lives: a URI plus the storage options to reach it."""

    uri: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    kind: str = "memory"

    def sub(self, name: str) -> Location:
        return Location(f"{self.uri}/{name}", self.storage_options, self.kind)

    def elsewhere(self) -> Location:
        """This location as a writer on another host reaches it (on S3: with a client of
        its own; writers share nothing else)."""
        if self.kind != "s3":
            return self
        return Location(self.uri, {**self.storage_options, "skip_instance_cache": True},
                        self.kind)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    from s3server import SeaweedS3Server  # tests/ is on sys.path

    with SeaweedS3Server() as server:
        yield server


def _location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Location:
    unique = uuid.uuid4().hex[:12]
    if kind == "memory":
        return Location(f"memory://{unique}", {}, kind)
    if kind == "local":
        return Location(str(tmp_path / "warehouse"), {}, kind)
    if kind in CLOUD:
        uri, options = request.getfixturevalue(f"{kind}_store")
        return Location(f"{uri}/{unique}", dict(options), kind)
    server = request.getfixturevalue("s3_server")
    options = dict(server.storage_options)
    if kind == "obstore":  # S3 through the opt-in client
        options["client"] = "obstore"
    return Location(f"s3://{server.bucket}/{unique}", options, kind)


# the cloud schemes tested on their emulators: scheme -> emulator (tests/emulators.py)
CLOUD = ("gs", "abfs")


@pytest.fixture(scope="session")
def gs_store() -> Iterator[tuple[str, dict[str, str]]]:
    """One fake-gcs-server for the run, with a bucket: (its gs:// URI, storage options)."""
    from emulators import FakeGcsServer, create_gcs_bucket, gcs_storage_options

    if not FakeGcsServer.available():
        pytest.skip("fake-gcs-server is not installed (make install)")
    with FakeGcsServer() as gcs:
        create_gcs_bucket(gcs, "olympia")
        yield "gs://olympia", gcs_storage_options(gcs)


@pytest.fixture(scope="session")
def abfs_store() -> Iterator[tuple[str, dict[str, str]]]:
    """One Azurite for the run, with a container: (its abfs:// URI, storage options)."""
    from emulators import Azurite, azure_storage_options, create_azure_container

    if not Azurite.available():
        pytest.skip("Azurite is not installed (make install)")
    with Azurite() as azure:
        create_azure_container(azure, "olympia")
        yield "abfs://olympia", azure_storage_options(azure)


@pytest.fixture(params=[*CLOUD, pytest.param("obstore", marks=pytest.mark.s3)])
def cloud_location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh catalog location on each cloud scheme's emulator (skipped where it is
    missing), and on S3 through the obstore client (kind ``obstore``: the s3fs client
    has its own tests)."""
    return _location(request.param, tmp_path, request)


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh, empty catalog location on each storage kind."""
    return _location(request.param, tmp_path, request)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def shared_location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A location several OS processes can reach (no memory storage)."""
    return _location(request.param, tmp_path, request)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session for the whole run (startup takes ~10 s), with Iceberg's
    Spark runtime and SQL extensions when ``make install`` fetched them (tests/test_rest_spark.py
    needs them; the other Spark tests do not)."""
    from iceberg_helpers import ICEBERG_SPARK_JARS

    from olympia.expire import local_session

    iceberg = {"spark.jars": ",".join(map(str, ICEBERG_SPARK_JARS)),
               "spark.sql.extensions":
                   "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"}
    session = local_session("local[2]", conf=iceberg if ICEBERG_SPARK_JARS else None)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # quiet its shutdown chatter
