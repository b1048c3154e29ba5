"""Distributed transactions (olympia.catalog.distributed): a named transaction that
statements from several processes extend and that commits as ONE version; the record's
compare-and-swap (Storage.replace) on memory, local disk and S3."""

from __future__ import annotations

import multiprocessing as mp
import threading
from typing import Any

import pytest
from conftest import Location
from expire_fixtures import expire_dtxn

from olympia import Catalog
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.distributed import TRANSACTION_ID
from olympia.catalog.keys import dtxn_path
from olympia.exceptions import (
    AlreadyExistsError,
    CatalogError,
    CommitConflict,
    InvalidArgumentError,
    InvalidNameError,
    NoSuchTransactionError,
    TransactionExpiredError,
)
from olympia.storage import Storage
from olympia.versions import history

COLS = [{"name": "id", "type": "int8"}]


def _catalog(location: Location) -> Catalog:
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    catalog.create_table("s", "orders", columns=COLS)
    return catalog


def _reopen(location: Location) -> Catalog:
    return Catalog.open(location.uri, location.storage_options)


# --- the record's compare-and-swap ---------------------------------------------------------


def test_replace_swaps_only_what_it_read(location: Location) -> None:
    storage = Storage(location.uri, location.storage_options)
    storage.write("dtxn/x.binpb", b"one")
    assert storage.replace("dtxn/x.binpb", b"two", b"one")
    assert not storage.replace("dtxn/x.binpb", b"three", b"one")  # it holds "two" now
    assert storage.read("dtxn/x.binpb") == b"two"
    assert not storage.replace("dtxn/missing.binpb", b"x", b"one")
    assert not storage.exists("dtxn/missing.binpb")


def test_replace_race_has_one_winner(location: Location) -> None:
    storage = Storage(location.uri, location.storage_options)
    storage.write("dtxn/r.binpb", b"start")
    start = threading.Barrier(8)
    wins: list[int] = []

    def race(i: int) -> None:
        start.wait()
        if storage.replace("dtxn/r.binpb", f"by {i}".encode(), b"start"):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert storage.read("dtxn/r.binpb") == f"by {wins[0]}".encode()


def _replace_in_process(uri: str, options: dict[str, Any], i: int, rounds: int) -> int:
    storage = Storage(uri, options)
    won = 0
    for _ in range(rounds):  # read-modify-write of a counter: a lost update would show
        while True:
            current = storage.read("dtxn/c.binpb")
            count = int(current.split(b":")[0])
            if storage.replace("dtxn/c.binpb", f"{count + 1}:{i}".encode(), current):
                won += 1
                break
    return won


def test_replace_counts_exactly_across_processes(shared_location: Location) -> None:
    storage = Storage(shared_location.uri, shared_location.storage_options)
    storage.write("dtxn/c.binpb", b"0:-")
    with mp.get_context("spawn").Pool(3) as pool:
        won = pool.starmap(_replace_in_process, [
            (shared_location.uri, shared_location.storage_options, i, 15) for i in range(3)])
    assert won == [15, 15, 15]
    assert storage.read("dtxn/c.binpb").split(b":")[0] == b"45"


# --- a transaction that many statements extend ---------------------------------------------


def test_statements_from_two_catalogs_commit_as_one_version(location: Location) -> None:
    catalog = _catalog(location)
    began = catalog.version
    dtx = catalog.begin_transaction("wap-1", info={"user": "ana", "dag_run": "r1"})
    other = _reopen(location)
    with other.transaction(name="wap-1") as stmt:
        stmt.create_table("s", "payments", columns=COLS)
    with catalog.transaction(name="wap-1") as stmt:
        assert stmt.table_exists("s.payments")  # read your (transaction's) writes
        stmt.drop_table("s.orders")
        stmt.annotate(job="second")
    assert catalog.version == began  # nothing landed yet
    reader = _reopen(location)
    assert reader.list_tables("s") == ["orders"]
    assert dtx.view().list_tables("s") == ["payments"]

    version = other.distributed_transaction("wap-1").commit()
    assert version == began + 1
    assert reader.refresh() == version
    assert reader.list_tables("s") == ["payments"]
    (entry,) = history(reader, limit=1)
    assert {k: entry.info[k] for k in ("user", "dag_run", "job", TRANSACTION_ID)} == {
        "user": "ana", "dag_run": "r1", "job": "second", TRANSACTION_ID: "wap-1"}
    assert not reader.storage.exists(dtxn_path("wap-1"))
    with pytest.raises(NoSuchTransactionError):
        dtx.commit()


def test_abort_leaves_nothing(location: Location) -> None:
    catalog = _catalog(location)
    before = catalog.version
    dtx = catalog.begin_transaction("t2")
    with catalog.transaction(name="t2") as stmt:
        stmt.create_table("s", "x", columns=COLS)
    _reopen(location).distributed_transaction("t2").abort()
    assert catalog.refresh() == before
    assert not catalog.table_exists("s.x")
    with pytest.raises(NoSuchTransactionError):
        catalog.transaction(name="t2")
    with pytest.raises(NoSuchTransactionError):
        dtx.commit()


def test_a_conflicting_commit_outside_fails_the_whole_transaction(location: Location) -> None:
    catalog = _catalog(location)
    catalog.begin_transaction("t3")
    with catalog.transaction(name="t3") as stmt:
        stmt.create_table("s", "fresh", columns=COLS)
        stmt.alter_table("s.orders", set_properties={"owner": "txn"})
    _reopen(location).alter_table("s.orders", set_properties={"owner": "outside"})
    latest = _reopen(location).version
    with pytest.raises(CommitConflict, match="s.orders"):
        catalog.distributed_transaction("t3").commit()
    after = _reopen(location)
    assert after.version == latest
    assert not after.table_exists("s.fresh")
    assert not after.storage.exists(dtxn_path("t3"))


def test_racing_statements_on_one_table_conflict_and_others_merge(location: Location) -> None:
    catalog = _catalog(location)
    catalog.begin_transaction("t4")
    first, second, third = (_reopen(location).transaction(name="t4") for _ in range(3))
    first.alter_table("s.orders", set_properties={"by": "first"})
    second.alter_table("s.orders", set_properties={"by": "second"})
    third.create_table("s", "other", columns=COLS)
    first.commit()
    with pytest.raises(CommitConflict, match="another statement"):
        second.commit()  # retryable: it read what the first one replaced
    third.commit()  # disjoint: rebuilt on the newest running root
    retry = catalog.transaction(name="t4")
    assert retry.load_table("s.orders").properties["by"] == "first"
    version = catalog.distributed_transaction("t4").commit()
    final = _reopen(location)
    assert final.version == version
    assert final.load_table("s.orders").properties["by"] == "first"
    assert final.table_exists("s.other")


def test_expired_transaction_takes_no_statement_and_no_commit(location: Location) -> None:
    catalog = _catalog(location)
    dtx = catalog.begin_transaction("t5", ttl_millis=60_000)
    stmt = catalog.transaction(name="t5")
    stmt.create_table("s", "late", columns=COLS)
    expire_dtxn(catalog, "t5")
    with pytest.raises(TransactionExpiredError):
        stmt.commit()
    with pytest.raises(TransactionExpiredError):
        catalog.transaction(name="t5")
    with pytest.raises(TransactionExpiredError):
        dtx.commit()
    dtx.abort()
    assert not catalog.storage.exists(dtxn_path("t5"))


def _seal(catalog: Catalog, txn_id: str) -> None:
    """A committer that sealed the record and then died."""
    dtx = catalog.distributed_transaction(txn_id)
    assert dtx.seal()


def test_a_sealed_transaction_is_finished_by_the_next_commit(location: Location) -> None:
    catalog = _catalog(location)
    catalog.begin_transaction("t6")
    with catalog.transaction(name="t6") as stmt:
        stmt.create_table("s", "x", columns=COLS)
    _seal(catalog, "t6")
    with pytest.raises(CatalogError, match="committing"):
        catalog.transaction(name="t6")
    with pytest.raises(CatalogError, match="being committed"):
        catalog.distributed_transaction("t6").abort()
    version = _reopen(location).distributed_transaction("t6").commit()
    assert _reopen(location).table_exists("s.x")
    assert _reopen(location).version == version


def test_a_landed_transaction_is_not_landed_twice(location: Location) -> None:
    """The committer died after its version landed, before deleting the record: the next
    commit finds the version by the transaction's instance and lands nothing."""
    catalog = _catalog(location)
    catalog.begin_transaction("t7")
    with catalog.transaction(name="t7") as stmt:
        stmt.create_table("s", "x", columns=COLS)
    dtx = catalog.distributed_transaction("t7")
    assert dtx.seal()
    version = dtx.landing(dtx.record).commit()  # lands; the record stays (the "crash")
    assert catalog.storage.exists(dtxn_path("t7"))
    assert _reopen(location).distributed_transaction("t7").commit() == version
    assert _reopen(location).version == version
    assert not catalog.storage.exists(dtxn_path("t7"))


def test_begin_refuses_what_it_cannot_honour(location: Location) -> None:
    catalog = _catalog(location)
    with pytest.raises(InvalidArgumentError, match="read"):
        catalog.begin_transaction("s1", isolation="SERIALIZABLE")
    for bad in ("", "../x", "a/b", "a?b", "a#b", ".hidden", "x" * 129, "sp ace", "ü"):
        with pytest.raises(InvalidNameError):
            catalog.begin_transaction(bad)
    with pytest.raises(InvalidArgumentError, match="TTL"):
        catalog.begin_transaction("ttl", ttl_millis=0)
    catalog.begin_transaction("dup")
    with pytest.raises(AlreadyExistsError):
        catalog.begin_transaction("dup")
    stmt = catalog.transaction(name="dup")
    stmt.set_catalog_def(catalog.catalog_def, actions.make(A.CATALOG_ALTER, None))
    with pytest.raises(InvalidArgumentError, match="catalog-level"):
        stmt.commit()


def _statement_in_process(uri: str, options: dict[str, Any], txn_id: str, name: str) -> str:
    catalog = Catalog.open(uri, options)
    while True:
        try:
            with catalog.transaction(name=txn_id) as stmt:
                stmt.create_table("s", name, columns=COLS)
            return name
        except CommitConflict:
            continue


def test_statements_from_several_processes_all_land(shared_location: Location) -> None:
    catalog = _catalog(shared_location)
    catalog.begin_transaction("many")
    names = [f"t{i}" for i in range(6)]
    with mp.get_context("spawn").Pool(3) as pool:
        pool.starmap(_statement_in_process, [
            (shared_location.uri, shared_location.storage_options, "many", n) for n in names])
    version = catalog.distributed_transaction("many").commit()
    final = _reopen(shared_location)
    assert final.version == version == catalog.version
    assert sorted(final.list_tables("s")) == sorted(["orders", *names])
