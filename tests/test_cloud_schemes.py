"""Google Cloud Storage (``gs://``) and Azure Blob Storage (``abfs://``) catalogs on their real
emulators (fake-gcs-server and Azurite, one of each per run; skipped only where the binary is
missing): the backend contract against a model under random operation sequences, racing
put-if-absent, the commit scenarios of tests/test_concurrency.py and
tests/test_commit_restore.py (a writer killed with SIGKILL or ``os._exit``, a prefix restored
from a copy, a lost answer), Iceberg tables through pyiceberg's ``OlympiaCatalog`` and through
``olympia serve``, the location rule on cloud warehouses, and both expiry engines."""

from __future__ import annotations

import itertools
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import test_commit_restore as restore
import test_concurrency as concurrency
import test_expire_rules as expire_rules
import test_expire_spark as expire_spark
import test_spark_source as spark_source
from conftest import Location
from emulators import AZURITE_ACCOUNT, AZURITE_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.exceptions import BadRequestError
from restserver import RestServer

from olympia import Catalog
from olympia.exceptions import (
    FileAlreadyExists,
    FileNotFound,
    InvalidArgumentError,
    TableLocationError,
    TransientStorageError,
)
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.options import iceberg_properties
from olympia.storage import Storage
from olympia.storage.gs import FAR_FUTURE_MS

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
NAMES = ("a", "vn/1", "node/x")
OPERATIONS = st.lists(st.tuples(
    st.sampled_from(["write", "create", "replace", "read", "read_if_changed", "exists",
                     "delete", "list"]),
    st.sampled_from(NAMES)), min_size=1, max_size=10)


# --- the backend contract ------------------------------------------------------------


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_the_backend_behaves_as_a_map_of_files(cloud_location: Location,
                                               operations: list[tuple[str, str]]) -> None:
    """Every operation of the contract against a dict: reads, exclusive creates,
    compare-and-swap, conditional reads (tags), existence, listing and deletes agree with
    the model after any sequence."""
    storage = Storage(f"{cloud_location.uri}/{uuid.uuid4().hex[:8]}",
                      cloud_location.storage_options)
    model: dict[str, bytes] = {}
    tags: dict[str, tuple[str, bytes]] = {}  # name -> (tag, content it came with)
    fresh = (f"content {i}".encode() for i in itertools.count())
    for op, name in operations:
        data = next(fresh)
        if op == "write":
            storage.write(name, data)
            model[name] = data
        elif op == "create":
            if name in model:
                with pytest.raises(FileAlreadyExists, match=name):
                    storage.create_exclusive(name, data)
            else:
                storage.create_exclusive(name, data)
                model[name] = data
        elif op == "replace":
            expected = model.get(name, b"absent")
            assert storage.replace(name, data, expected) == (name in model)
            assert not storage.replace(name, next(fresh), b"stale")
            if name in model:
                model[name] = data
        elif op in ("read", "read_if_changed") and name not in model:
            with pytest.raises(FileNotFound, match=name):
                storage.read(name) if op == "read" else storage.read_if_changed(name, "")
        elif op == "read":
            assert storage.read(name) == model[name]
        elif op == "read_if_changed":
            tag, held = tags.get(name, ("", b""))
            got, new_tag = storage.read_if_changed(name, tag)
            assert got == (None if tag and held == model[name] else model[name])
            tags[name] = (new_tag, model[name])
        elif op == "exists":
            assert storage.exists(name) == (name in model)
        elif op == "delete":
            storage.delete_many([name, "never/written"])
            model.pop(name, None)
        else:
            assert [f.path for f in storage.list()] == sorted(model)
            assert all(f.size == len(model[f.path]) for f in storage.list())
    assert {f.path: storage.read(f.path) for f in storage.list()} == model


@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writers=st.integers(2, 8), publishing=st.sets(st.integers(0, 7)),
       taken=st.booleans())
def test_exactly_one_racing_create_wins(cloud_location: Location, writers: int,
                                        publishing: set[int], taken: bool) -> None:
    """Put-if-absent under a race of threads sharing one Storage, some creating the root
    alone and some publishing files first (as a commit does): exactly one wins (none if
    the root was taken before), and the root holds the winner's content."""
    storage = Storage(f"{cloud_location.uri}/{uuid.uuid4().hex[:8]}",
                      cloud_location.storage_options)
    if taken:
        storage.create_exclusive("vn/1", b"before")
    wins: list[int] = []
    barrier = threading.Barrier(writers)

    def go(i: int) -> None:
        barrier.wait()
        try:
            if i in publishing:
                storage.publish({f"node/{i}": b"n"}, "vn/1", f"writer {i}".encode())
            else:
                storage.create_exclusive("vn/1", f"writer {i}".encode())
            wins.append(i)
        except FileAlreadyExists:
            pass

    threads = [threading.Thread(target=go, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == (0 if taken else 1)
    assert storage.read("vn/1") == (b"before" if taken else f"writer {wins[0]}".encode())


def test_exactly_one_racing_process_wins(cloud_location: Location) -> None:
    """The same race between processes, each with its own client."""
    concurrency.test_exclusive_create_race(cloud_location, 4)


def test_unknown_options_and_foreign_properties_are_refused(cloud_location: Location) -> None:
    """What a scheme cannot honour exactly is refused, naming it."""
    scheme = cloud_location.kind
    if scheme == "obstore":  # s3fs options obstore is not given, a client of no name
        for option, name in [({"endpoint": "x"}, "endpoint"),
                             ({"requester_pays": True}, "requester_pays"),
                             ({"client_kwargs": {"verify": False}}, "client_kwargs.verify"),
                             ({"config_kwargs": {"s3": {"payload_signing_enabled": True}}},
                              "config_kwargs.s3.payload_signing_enabled")]:
            with pytest.raises(InvalidArgumentError,
                               match=f"storage option {name} is not supported with "
                                     "client=obstore"):
                Storage(cloud_location.uri, {**cloud_location.storage_options, **option})
        with pytest.raises(InvalidArgumentError,
                           match="storage option client must be one of s3fs, obstore"):
            Storage(cloud_location.uri, {**cloud_location.storage_options, "client": "boto"})
        secret = {**cloud_location.storage_options, "secret": "s3cr3t-value", "token": 7}
        with pytest.raises(InvalidArgumentError) as raised:
            Storage(cloud_location.uri, {**secret, "profile": "s3cr3t-value"})
        assert "s3cr3t-value" not in str(raised.value)
        with pytest.raises(InvalidArgumentError,
                           match="storage option profile is not supported with client=obstore"):
            OlympiaCatalog("c", uri=cloud_location.uri, **{"s3.profile-name": "x"},
                           **_properties(cloud_location))
        return
    with pytest.raises(InvalidArgumentError, match=f"storage option endpoint is not one a {scheme}://"):
        Storage(cloud_location.uri, {**cloud_location.storage_options, "endpoint": "x"})
    if scheme == "abfs":  # an account in the URI that the options contradict
        with pytest.raises(InvalidArgumentError, match="names account 'other'"):
            Storage("abfs://olympia@other.dfs.core.windows.net/x",
                    cloud_location.storage_options)
    prefix = {"gs": "gcs.requester-pays", "abfs": "adls.tenant-id"}[scheme]
    with pytest.raises(InvalidArgumentError, match=f"property {prefix} is not supported"):
        OlympiaCatalog("c", uri=cloud_location.uri, **{prefix: "x"},
                       **_properties(cloud_location))


@pytest.mark.parametrize("scheme", ["gs", "abfs", "obstore"])
def test_an_unreachable_store_fails_every_operation_as_transient(scheme: str) -> None:
    """Nothing listens at the endpoint: each operation of the contract is retried, then
    reported as a transient storage error naming the file, never as the client library's
    own exception (no emulator needed)."""
    with socket.socket() as probe:  # a loopback port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    options = {"gs": {"endpoint_url": endpoint, "token": "emulator", "project": "test"},
               "abfs": {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY,
                        "endpoint_url": f"{endpoint}/{AZURITE_ACCOUNT}"},
               "obstore": {"client": "obstore", "key": "k", "secret": "s",
                           "endpoint_url": endpoint}}[scheme]
    uri = f"{'s3' if scheme == 'obstore' else scheme}://olympia/x"
    storage = Storage(uri, {**options, "retry_attempts": 2, "retry_backoff": 0})
    operations = {"read": lambda: storage.read("a"), "exists": lambda: storage.exists("a"),
                  "write": lambda: storage.write("a", b"1"),
                  "create": lambda: storage.create_exclusive("vn/1", b"1"),
                  "list": lambda: storage.list(), "delete": lambda: storage.delete_many(["a"])}
    for name, operation in operations.items():
        storage.stats.reset()
        with pytest.raises(TransientStorageError, match="after 2 tries"):
            operation()
        assert storage.stats.retries >= 1, name
    storage.close()


# --- commits: kill -9, restore, lost answers ------------------------------------------


def test_a_writer_killed_before_its_root_leaves_the_previous_version(
        cloud_location: Location) -> None:
    concurrency.test_writer_killed_before_root_leaves_previous_version(cloud_location)


def test_a_killed_coalescing_writer_never_has_its_change_land(
        cloud_location: Location, tmp_path: Path) -> None:
    restore.test_a_killed_coalescing_writer_never_has_its_change_land(cloud_location, tmp_path)


def test_writers_in_processes_race_for_one_object(cloud_location: Location) -> None:
    concurrency.test_same_object_in_processes_one_wins(cloud_location)


def test_a_restored_prefix_loses_no_update_and_is_built_on(cloud_location: Location) -> None:
    restore.test_a_restored_catalog_loses_no_update(cloud_location)
    other = Location(f"{cloud_location.uri}-2", cloud_location.storage_options,
                     cloud_location.kind)
    restore.test_a_commit_after_a_restore_builds_on_the_restored_version(other)


def test_a_lost_answer_and_a_commit_that_gave_up(cloud_location: Location) -> None:
    restore.test_a_lost_answer_to_a_create_is_never_a_conflict(cloud_location)
    other = Location(f"{cloud_location.uri}-2", cloud_location.storage_options,
                     cloud_location.kind)
    restore.test_a_commit_that_gave_up_never_lands_later(other)


# --- Iceberg: pyiceberg, olympia serve, the location rule ------------------------------


def _properties(location: Location) -> dict[str, str]:
    """The catalog properties of an OlympiaCatalog on ``location``: the scheme's FileIO
    properties, which reach the catalog's own files too."""
    return iceberg_properties(location.uri, location.storage_options)


def test_iceberg_tables_through_pyiceberg(cloud_location: Location) -> None:
    catalog = OlympiaCatalog("cloud", uri=f"{cloud_location.uri}/catalog",
                             warehouse=f"{cloud_location.uri}/tables",
                             **{"olympia.create": "true"}, **_properties(cloud_location))
    catalog.create_namespace("ns")
    table = catalog.create_table(("ns", "t"), ROWS.schema)
    table.append(ROWS)
    table.append(ROWS)
    assert table.location().startswith(f"{cloud_location.uri}/tables/")
    again = OlympiaCatalog("again", uri=f"{cloud_location.uri}/catalog",
                           **_properties(cloud_location))
    assert sorted(again.load_table(("ns", "t")).scan().to_arrow()["id"].to_pylist()) == [
        1, 1, 2, 2, 3, 3]
    assert len(again.load_table(("ns", "t")).history()) == 2
    catalog.close()
    again.close()


def _attacks(location: Location) -> list[str]:
    """Locations outside ``location``'s warehouse: ``..`` (plain or encoded), a query, a
    fragment, another bucket or container, and on Azure another account."""
    scheme, _, rest = location.uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    root = f"{location.uri}/tables"
    found = [f"{root}/../elsewhere/t", f"{root}/ns/t?x=1", f"{root}/ns/t#f",
             f"{root}/%2E%2E/x", f"{scheme}://other-{bucket}/{prefix}/tables/ns/t"]
    if scheme == "abfs":
        found.append(f"abfs://{bucket}@other.dfs.core.windows.net/{prefix}/tables/ns/t")
    return found


def test_locations_of_refused_forms_on_a_cloud_warehouse(cloud_location: Location) -> None:
    """In process, the forms a FileIO could read differently are refused (the caller is
    trusted with other places)."""
    catalog = OlympiaCatalog("cloud", uri=f"{cloud_location.uri}/catalog",
                             warehouse=f"{cloud_location.uri}/tables",
                             **{"olympia.create": "true"}, **_properties(cloud_location))
    catalog.create_namespace("ns")
    for outside in _attacks(cloud_location)[:4]:
        with pytest.raises(TableLocationError, match="is refused"):
            catalog.create_table(("ns", "t"), ROWS.schema, location=outside)
    assert catalog.list_tables("ns") == []
    catalog.close()


def test_iceberg_tables_through_olympia_serve(cloud_location: Location) -> None:
    """Tables through the REST server on a cloud warehouse; every location outside it
    (the one location rule, by the scheme table) is refused."""
    uri = f"{cloud_location.uri}/catalog"
    Catalog.create(uri, cloud_location.storage_options).close()
    client_properties = {k: v for k, v in _properties(cloud_location).items()
                         if not k.startswith("olympia.")}  # (the client's choice: not theirs)
    flags = tuple(f"--client-property={k}={v}" for k, v in client_properties.items())
    with RestServer(uri, f"{cloud_location.uri}/tables", cloud_location.storage_options,
                    flags) as server:
        client = server.client()
        client.create_namespace("ns")
        table = client.create_table(("ns", "t"), ROWS.schema)
        table.append(ROWS)
        loaded = client.load_table(("ns", "t"))
        assert loaded.scan().to_arrow().num_rows == 3
        assert loaded.metadata_location.startswith(f"{cloud_location.uri}/tables/")
        for outside in _attacks(cloud_location):
            with pytest.raises(BadRequestError):
                client.create_table(("ns", "u"), ROWS.schema, location=outside)
        assert client.list_tables("ns") == [("ns", "t")]
    assert "Traceback" not in "".join(server.log)


# --- expiry ----------------------------------------------------------------------------


def test_local_expiry(cloud_location: Location) -> None:
    expire_rules.test_local_engine_end_to_end(cloud_location)


@pytest.mark.spark
def test_spark_expiry(spark: Any, cloud_location: Location) -> None:
    expire_spark.test_spark_expiry_keeps_every_live_file(spark, cloud_location)


# --- the profiles' mappings ----------------------------------------------------------------


@pytest.mark.parametrize(("uri", "options"), [
    ("gs://b/p", {"endpoint_url": "http://127.0.0.1:1", "project": "pr", "token": "tk"}),
    ("abfs://c/p", {"account_name": "acct", "account_key": "k",
                    "endpoint_url": "http://127.0.0.1:1/acct"}),
    ("abfs://c/p", {"account_name": "acct", "sas_token": "sv=1",
                    "endpoint_url": "https://acct.blob.core.windows.net"}),
])
def test_options_survive_the_data_source_and_the_connection(uri: str,
                                                            options: dict[str, str]) -> None:
    """Storage options -> the Spark data source's properties -> storage options again, by
    the scheme's profile; the Airflow connection's Login and Password land on the scheme's
    options; the Asset of the catalog is named by the scheme."""
    from olympia.iceberg.options import storage_options
    from olympia.spark import properties_from_storage_options
    from olympia_provider.assets import catalog_asset_uri
    from olympia_provider.hooks.olympia import settings_from_connection

    properties = properties_from_storage_options(options, uri)
    assert properties["py-io-impl"] == "pyiceberg.io.pyarrow.PyArrowFileIO"
    # a token gets the expiry pyarrow's FileIO needs with it
    expiry = {"token_expires_at": FAR_FUTURE_MS} if "token" in options else {}
    assert storage_options(uri, properties) == {**options, **expiry}
    conn = type("Conn", (), {"conn_id": "c", "host": uri, "login": "L", "password": "P",
                             "extra_dejson": {}})()
    scheme = uri.partition(":")[0]
    login, password = {"gs": ("project", "token"), "abfs": ("account_name", "account_key")}[
        scheme]
    assert settings_from_connection(conn) == (uri, {login: "L", password: "P"})
    assert catalog_asset_uri(uri) == f"olympia://{scheme}/{uri.partition('://')[2]}"
    assert catalog_asset_uri(uri.replace("abfs://", "az://")) == catalog_asset_uri(uri)


# --- the PySpark data source -------------------------------------------------------------


@pytest.mark.spark
def test_the_spark_data_source_writes_and_reads(spark: Any, cloud_location: Location) -> None:
    """The ``olympia`` data source on a cloud catalog and warehouse: its catalog properties
    made from the storage options by the scheme's profile; an append is one catalog
    version and reads back whole, through Spark and through pyiceberg."""
    import olympia.spark

    olympia.spark.register(spark)
    properties = {**olympia.spark.properties_from_storage_options(
        cloud_location.storage_options, cloud_location.uri),
        "uri": f"{cloud_location.uri}/catalog", "warehouse": f"{cloud_location.uri}/tables",
        "olympia.create": "true"}
    if cloud_location.kind == "obstore":  # (tests/iceberg_helpers.py, s3_properties)
        properties["py-io-impl"] = "pyiceberg.io.fsspec.FsspecFileIO"
    table, catalog = spark_source.new_table(properties)
    version = catalog.olympia.refresh()
    df = spark_source.rows(spark, 2000)
    spark_source.write(df, properties, table)
    assert catalog.olympia.refresh() == version + 1
    assert catalog.load_table(table).scan().to_arrow().num_rows == 2000
    back = spark_source.read(spark, properties, table)
    assert spark_source.checksum(back) == spark_source.checksum(df)
