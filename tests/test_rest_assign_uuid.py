"""``assign-uuid`` keeps a table's uuid: another uuid is refused (400, as Iceberg's Java
catalog refuses it: "Cannot reassign uuid"), the same one changes nothing, and a table being
created takes the one its create assigns. Through ``olympia serve`` and the library."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from iceberg_helpers import local_properties, open_catalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.table.update import AssignUUIDUpdate
from restserver import RestServer, assert_error, request, version

from olympia.exceptions import InvalidArgumentError

SCHEMA = pa.schema([pa.field("id", pa.int64())])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("uuid")) as started:
        started.client().create_namespace("ns")
        yield started
    assert not any("Traceback" in line for line in started.log), "".join(started.log)


def assign(table_uuid: str) -> list[dict[str, str]]:
    return [{"action": "assign-uuid", "uuid": table_uuid}]


def test_another_uuid_is_a_400_and_the_same_one_changes_nothing(server: RestServer) -> None:
    table = server.client().create_table(("ns", "t"), SCHEMA)
    own, other = str(table.metadata.table_uuid), str(uuid.uuid4())
    before = version(server)
    path = "/v1/namespaces/ns/tables/t"
    answer = request(server, "POST", path, json.dumps({"requirements": [],
                                                       "updates": assign(other)}))
    assert_error(answer, 400, "BadRequestException",
                 f"table ns.t: cannot reassign its uuid {own} to {other}")
    transaction = {"table-changes": [{"identifier": {"namespace": ["ns"], "name": "t"},
                                      "requirements": [], "updates": assign(other)}]}
    assert_error(request(server, "POST", "/v1/transactions/commit", json.dumps(transaction)),
                 400, "BadRequestException", "cannot reassign its uuid")
    assert version(server) == before
    status, _, body = request(server, "POST", path, json.dumps({"requirements": [],
                                                                "updates": assign(own)}))
    assert status == 200 and body["metadata"]["table-uuid"] == own
    assert body["metadata-location"] == table.metadata_location and version(server) == before
    with pytest.raises(BadRequestError, match="cannot reassign its uuid"):
        table.transaction()._apply((AssignUUIDUpdate(uuid=uuid.UUID(other)),)
                                   ).commit_transaction()
    assert str(server.client().load_table(("ns", "t")).metadata.table_uuid) == own


def test_a_staged_create_takes_the_uuid_it_assigns(server: RestServer) -> None:
    """pyiceberg's create transaction commits ``assert-create`` with ``assign-uuid``."""
    with server.client().create_table_transaction(("ns", "staged"), SCHEMA) as created:
        created.set_properties(note="staged")
    table = server.client().load_table(("ns", "staged"))
    assert table.properties["note"] == "staged"
    status, _, _ = request(server, "POST", "/v1/namespaces/ns/tables/staged", json.dumps(
        {"requirements": [], "updates": assign(str(table.metadata.table_uuid))}))
    assert status == 200


def test_the_library_refuses_another_uuid(tmp_path: Path) -> None:
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("ns")
    table = catalog.create_table(("ns", "t"), SCHEMA)
    other = uuid.uuid4()
    with pytest.raises(InvalidArgumentError, match="cannot reassign its uuid"):
        catalog.commit_table(table, (), (AssignUUIDUpdate(uuid=other),))
    same = catalog.commit_table(table, (), (AssignUUIDUpdate(uuid=table.metadata.table_uuid),))
    assert same.metadata_location == table.metadata_location
