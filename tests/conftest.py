"""Shared fixtures: catalog locations on memory, local disk and a real S3 server."""

from __future__ import annotations

import logging
import os
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
    server = request.getfixturevalue("s3_server")
    options = dict(server.storage_options)
    return Location(f"s3://{server.bucket}/{unique}", options, kind)


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
