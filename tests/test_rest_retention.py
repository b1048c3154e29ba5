"""A kept catalog version stays readable through `olympia serve`, at the REST level (pyiceberg's
RestCatalog and raw requests; tests/test_rest_spark_retention.py does it with Spark's
procedures): a ``remove-snapshots`` of a snapshot that a kept catalog version reads is a 409
naming the versions and exports, on local disk and on the S3 server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from iceberg_helpers import rows, s3_properties
from pyiceberg.exceptions import CommitFailedException
from restserver import RestServer, assert_error, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.versions import export
from olympia.versions.policy import ExpirePolicy, save_defaults

CLIENT_KEYS = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region",
               "py-io-impl")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RestServer]:
    """``olympia serve`` over a new catalog on local disk or on the S3 server."""
    if request.param == "local":
        started = RestServer.on_new_catalog(tmp_path)
    else:
        s3_server = request.getfixturevalue("s3_server")
        props = s3_properties(s3_server, uuid.uuid4().hex[:12])
        OlympiaStore.create(props["uri"], s3_server.storage_options).close()
        clients = [f"--client-property={key}={props[key]}" for key in CLIENT_KEYS]
        started = RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                             tuple(clients))
    with started:
        yield started


def export_target(server: RestServer, tmp_path: Path) -> str:
    """Where an export of the server's catalog may go (beside it)."""
    if server.catalog_uri.startswith("s3://"):
        return server.catalog_uri.rsplit("/", 1)[0] + "/export"
    return str(tmp_path / "export")


def remove_snapshots(server: RestServer, table: str, *snapshots: int,
                     ) -> tuple[int, dict[str, str], Any]:
    body = {"requirements": [],
            "updates": [{"action": "remove-snapshots", "snapshot-ids": list(snapshots)}]}
    return request(server, "POST", f"/v1/namespaces/ns/tables/{table}", json.dumps(body))


def ids(server: RestServer, at: str, table: str = "ns.t") -> list[int]:
    """The ids a scan of ``table`` reads through ``<warehouse>@<at>``."""
    loaded = server.client(warehouse=f"{server.warehouse}@{at}").load_table(table)
    return sorted(loaded.scan().to_arrow().column("id").to_pylist())


def test_removing_a_snapshot_a_kept_version_reads_is_a_409(server: RestServer,
                                                             tmp_path: Path) -> None:
    client = server.client()
    client.create_namespace("ns")
    table = client.create_table("ns.t", rows(0).schema,
                                properties={"write.metadata.previous-versions-max": "1"})
    snapshots, versions = [], []
    for start in (0, 3, 6):
        table.append(rows(start))
        snapshots.append(table.metadata.current_snapshot_id)
        versions.append(version(server))
    first, second, third = snapshots

    # every version is in the retention window (defaults: keep-last 10, older-than 7d)
    before = version(server)
    answer = remove_snapshots(server, "t", first)
    assert_error(answer, 409, "CommitFailedException", f"snapshot {first}: catalog versions ")
    message = answer[2]["error"]["message"]
    assert "(the retention window: keep-last 10, older-than 1w) read it as main" in message
    with pytest.raises(CommitFailedException, match=f"snapshot {second}: catalog versions"):
        table.maintenance.expire_snapshots().by_id(second).commit()
    assert version(server) == before
    # nothing trimmed the metadata-log, whatever write.metadata.previous-versions-max says
    assert len(client.load_table("ns.t").metadata.metadata_log) == 3
    assert [ids(server, str(v)) for v in versions] == [
        [0, 1, 2], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7, 8]]

    # only the latest version in the window; the first append's version pinned by an export
    store = OlympiaStore.open(server.catalog_uri, server.storage_options)
    try:
        export(store, "pinned", export_target(server, tmp_path), "minimal",
               target_storage_options=server.storage_options, version=versions[0])
        save_defaults(store, ExpirePolicy(keep_last=1, older_than_ms=0, force=True))
        pinned_file = store.at_version(versions[0]).load_table(("ns", "t")).location
    finally:
        store.close()
    answer = remove_snapshots(server, "t", first, second)
    assert_error(answer, 409, "CommitFailedException",
                 f"cannot remove 1 snapshot(s) of table ns.t that kept catalog versions read "
                 f"— snapshot {first}: export pinned (catalog version {versions[0]}) read it "
                 "as main.")
    assert str(second) not in answer[2]["error"]["message"]

    before = version(server)
    status, _, body = remove_snapshots(server, "t", second)
    assert status == 200, body
    assert version(server) == before + 1
    current = client.load_table("ns.t").metadata
    assert [s.snapshot_id for s in current.snapshots] == [first, third]
    # the log keeps the export's metadata file and what pyiceberg keeps (one entry)
    assert len(current.metadata_log) == 2
    assert current.metadata_log[0].metadata_file == pinned_file
    assert ids(server, "export:pinned") == [0, 1, 2]
    assert ids(server, str(version(server))) == list(range(9))
