"""Two live tables never share files, however writers race (issue: the location rule
re-checked on rebase).

A create, register or relocation is checked against the version it is staged on; a commit
that lost the race to newer versions re-checks the places it claims against the tables
those versions changed, and is refused with ``LocationInUseError`` (nothing of it lands) as
if the other writer had committed first. A distributed transaction's landing (whoever lands
it) re-checks the places its running tree takes against every version since it began, and
a statement against the statements added to it since the running view it read.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import Cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows
from pyiceberg.exceptions import BadRequestError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table.update import SetLocationUpdate
from restserver import RestServer, version

from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import Transaction
from olympia.exceptions import CommitConflict, LocationInUseError, NoSuchTransactionError
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.locations import LiveIndex, LiveTable


def _two_writers(tmp_path: Path) -> tuple[OlympiaCatalog, OlympiaCatalog, str]:
    props = local_properties(tmp_path)
    first = open_catalog(props, "one")
    first.create_namespace("ns")
    first.create_table("ns.s", SCHEMA, location=f"{props['warehouse']}/s")  # version 2
    return first, open_catalog(props, "two"), props["warehouse"]


def _take(how: str, tx: OlympiaCatalog, wh: str, elsewhere: Path) -> None:
    """Stage a table's taking ``<wh>/x``: by a create, a create and a rename, a move, or a
    register of a table another catalog (at ``elsewhere``) made there."""
    if how == "register":
        made = open_catalog({**local_properties(elsewhere), "warehouse": wh}, "elsewhere")
        made.create_namespace("ns")
        tx.register_table("ns.a", made.create_table("ns.r", SCHEMA,
                                                    location=f"{wh}/x").metadata_location)
        return
    if how == "relocate":
        table = tx.load_table("ns.s")
        tx.commit_table(table, (), (SetLocationUpdate(location=f"{wh}/x"),))
        return
    tx.create_table("ns.a", SCHEMA, location=f"{wh}/x")
    if how == "create, rename":
        tx.rename_table("ns.a", "ns.c")


@pytest.mark.parametrize(("how", "taker"), [("create", "ns.a"), ("create, rename", "ns.c"),
                                            ("relocate", "ns.s"), ("register", "ns.a")])
def test_places_taken_on_one_base_do_not_both_land(tmp_path: Path, how: str,
                                                   taker: str) -> None:
    one, two, wh = _two_writers(tmp_path)
    expected = rf"table {taker}: location .* of table ns\.b, which took it in catalog version 3"
    with (pytest.raises(LocationInUseError, match=expected) as refused,
          one.transaction() as outer):
        _take(how, outer, wh, tmp_path / "elsewhere")
        written = set((tmp_path / "warehouse" / "x" / "metadata").glob("*"))
        with two.transaction() as inner:  # staged on the same base, lands first
            inner.create_table("ns.b", SCHEMA, location=f"{wh}/x/y")
    assert refused.value.other == "ns.b"
    assert sorted(t for _, t in one.list_tables("ns")) == ["b", "s"]
    assert one.olympia.refresh() == 3  # the refused commit left no version
    left = set((tmp_path / "warehouse" / "x" / "metadata").glob("*"))
    assert left == (written if how == "register" else set())  # nor metadata files
    assert one.load_table("ns.s").location() == f"{wh}/s"
    two.load_table("ns.b").append(rows(0))
    assert one.load_table("ns.b").scan().to_arrow().num_rows == 3
    result = Cli({})("verify", "-c", local_properties(tmp_path)["uri"])
    assert result.exit_code == 0, result.output


def test_a_server_client_taking_the_place_first_refuses_the_library_commit(
        tmp_path: Path) -> None:
    """The other writer is ``olympia serve`` (a pyiceberg RestCatalog's create lands while
    a library transaction holds a create staged on the version before)."""
    with RestServer.on_new_catalog(tmp_path) as server:
        client, wh = server.client(), server.warehouse
        client.create_namespace("ns")
        library = OlympiaCatalog("lib", uri=server.catalog_uri, warehouse=wh)
        with (pytest.raises(LocationInUseError, match=r"ns\.a: .* of table ns\.b, which took"),
              library.transaction() as tx):
            tx.create_table("ns.a", SCHEMA, location=f"{wh}/x")
            client.create_table(("ns", "b"), SCHEMA, location=f"{wh}/x/y")
            landed = version(server)
        assert version(server) == landed
        assert client.list_tables("ns") == [("ns", "b")]
        client.load_table(("ns", "b")).append(rows(0))
        assert library.load_table("ns.b").scan().to_arrow().num_rows == 3
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def _dtxn_and_outsider(tmp_path: Path) -> tuple[OlympiaCatalog, str, str]:
    """A distributed transaction (begun on version 2) whose statement created ``ns.b`` at
    ``<wh>/x/y``, and versions landed outside since: an unrelated one, ``ns.a`` at
    ``<wh>/x`` (version 4), another unrelated one. Returns the outside writer, the
    warehouse and the transaction's id."""
    one, two, wh = _two_writers(tmp_path)
    dtx = one.olympia.begin_transaction()
    one.in_transaction(dtx.id).create_table("ns.b", SCHEMA, location=f"{wh}/x/y")
    two.create_table("ns.z1", SCHEMA, location=f"{wh}/z1")  # version 3
    two.create_table("ns.a", SCHEMA, location=f"{wh}/x")  # version 4: took an enclosing place
    two.create_table("ns.z2", SCHEMA, location=f"{wh}/z2")  # version 5
    return two, wh, dtx.id


def _refused_and_aborted(outside: OlympiaCatalog, txn_id: str) -> None:
    """Nothing of transaction ``txn_id`` landed, its record is gone, no two tables share
    files."""
    store = outside.olympia
    assert store.refresh() == 5
    assert sorted(t for _, t in outside.list_tables("ns")) == ["a", "s", "z1", "z2"]
    with pytest.raises(NoSuchTransactionError):
        store.distributed_transaction(txn_id)
    _no_two_share_files(store.at_version(5))


LANDING_REFUSED = (r"table ns\.b: location .*/x/y overlaps the location .*/x of table ns\.a, "
                   r"which took it in catalog version 4, committed after this transaction "
                   r"began on version 2")


def test_a_distributed_transaction_is_rechecked_against_every_version_since_it_began(
        tmp_path: Path) -> None:
    """Landed by a catalog object that staged nothing of it (as another process would):
    the places it claims are read from the store, and every version since its beginning
    is checked, not only those since a lost race."""
    outside, _, txn_id = _dtxn_and_outsider(tmp_path)
    lander = open_catalog(local_properties(tmp_path), "lander")
    with pytest.raises(LocationInUseError, match=LANDING_REFUSED) as refused:
        lander.olympia.distributed_transaction(txn_id).commit()
    assert refused.value.other == "ns.a"
    _refused_and_aborted(outside, txn_id)


def test_olympia_txn_commit_rechecks_the_places_the_transaction_takes(tmp_path: Path) -> None:
    outside, _, txn_id = _dtxn_and_outsider(tmp_path)
    result = Cli({})("txn", "commit", "-c", local_properties(tmp_path)["uri"], txn_id)
    assert result.exit_code != 0
    assert re.search(LANDING_REFUSED, result.output), result.output
    _refused_and_aborted(outside, txn_id)


def test_a_transaction_warehouse_commit_through_olympia_serve_is_rechecked(
        tmp_path: Path) -> None:
    with RestServer.on_new_catalog(tmp_path) as server:
        client, wh = server.client(), server.warehouse
        client.create_namespace("ns")
        client.create_namespace(("sys", "dtxns", "job"))
        inside = server.client(warehouse=f"{wh}@txn:job")
        inside.create_table(("ns", "b"), SCHEMA, location=f"{wh}/x/y")
        client.create_table(("ns", "a"), SCHEMA, location=f"{wh}/x")  # outside, lands first
        landed = version(server)
        with pytest.raises(BadRequestError, match=r"table ns\.b: location .* overlaps the "
                           r"location .*/x of table ns\.a, which took it in catalog version"):
            client.update_namespace_properties(("sys", "dtxns", "job"),
                                               updates={"commit": "true"})
        assert version(server) == landed
        assert ("sys", "dtxns", "job") not in client.list_namespaces(("sys", "dtxns"))
        assert client.list_tables("ns") == [("ns", "a")]
    assert not any("Traceback" in line for line in server.log), "".join(server.log)


def test_statements_racing_in_one_transaction_do_not_both_take_a_place(tmp_path: Path) -> None:
    """Two statements staged on the same running view: the second to be added is checked
    against the statement added meanwhile, and refused (nothing of it added)."""
    one, two, wh = _two_writers(tmp_path)
    dtx = one.olympia.begin_transaction()
    with (pytest.raises(LocationInUseError, match=r"table ns\.a: location .* overlaps the "
                        r"location .*/x/y of table ns\.b, which took it in a statement added "
                        r"to the distributed transaction meanwhile") as refused,
          one.in_transaction(dtx.id).transaction() as first):
        first.create_table("ns.a", SCHEMA, location=f"{wh}/x")  # its file written on adding
        with two.in_transaction(dtx.id).transaction() as second:  # same view, added first
            second.create_table("ns.b", SCHEMA, location=f"{wh}/x/y")
    assert refused.value.other == "ns.b"
    assert not set((tmp_path / "warehouse" / "x" / "metadata").glob("*"))  # never written
    assert [t for _, t in one.in_transaction(dtx.id).list_tables("ns")] == ["b", "s"]
    assert one.olympia.distributed_transaction(dtx.id).commit() == 3
    _no_two_share_files(one.olympia.at_version(3))


# --- racing writers: the property --------------------------------------------------------

SEEDED = ("a", "b")  # live before the writers start, at <wh>/u/<name>
NEW = ("c", "d", "e", "f")
PLACES = ("p", "p/q", "p/q/r", "p/z", "s", "u")  # nested and disjoint, under the warehouse
Op = tuple[str, str, str]  # create/rename/drop/relocate, table, place or new name
CREATE = st.tuples(st.just("create"), st.sampled_from(NEW), st.sampled_from(PLACES))
RELOCATE = st.tuples(st.just("relocate"), st.sampled_from(SEEDED), st.sampled_from(PLACES))
OPS = st.one_of(  # mostly places taken: the races that matter
    CREATE, CREATE, CREATE, RELOCATE, RELOCATE,
    st.tuples(st.just("rename"), st.sampled_from(SEEDED + NEW), st.sampled_from(NEW)),
    st.tuples(st.just("drop"), st.sampled_from(SEEDED + NEW), st.just("")))
# per writer: its transactions, each a few staged operations
WRITERS = st.lists(st.lists(st.lists(OPS, min_size=1, max_size=2), min_size=1, max_size=2),
                   min_size=2, max_size=3)


@dataclass
class _Writer:
    """One writer (its own OlympiaCatalog object) running its transactions in turn: each
    a transaction of its own, or (``distributed``) a distributed transaction whose every
    operation is a statement, landed at the end."""

    catalog: OlympiaCatalog
    wh: str
    todo: list[list[Op]]
    distributed: bool = False
    txn: Transaction | None = None
    bound: OlympiaCatalog | None = None
    dtx: str | None = None
    tag: str = ""
    staged: int = 0

    def step(self, outcomes: dict[str, int | None]) -> None:
        """Begin the next transaction, stage its next operation, or commit it."""
        if self.txn is None and self.dtx is None:
            if not self.todo:
                return
            self.tag = f"{self.catalog.name}-{len(outcomes)}"
            outcomes[self.tag], self.staged = None, 0
            if self.distributed:
                self.dtx = self.catalog.olympia.begin_transaction(info={"test_tag": self.tag}).id
            else:
                self.txn = self.catalog.olympia.transaction()
                self.bound = self.catalog.bound_to(self.txn)
                self.txn.annotate(test_tag=self.tag)
        if self.staged < len(self.todo[0]):
            op = self.todo[0][self.staged]
            self.staged += 1
            if self.dtx is not None:  # one statement, added at once
                with self.catalog.in_transaction(self.dtx).transaction() as statement:
                    _stage(statement, self.wh, op)
            else:
                assert self.bound is not None
                _stage(self.bound, self.wh, op)
            return
        self.todo.pop(0)
        if self.dtx is not None:
            self._land(outcomes)
            return
        txn, self.txn = self.txn, None
        assert txn is not None
        changes = bool(txn.actions)  # (a transaction with none commits no version)
        try:
            version = txn.commit()
            outcomes[self.tag] = version if changes else None
        except (LocationInUseError, CommitConflict):
            assert txn.state == "aborted"  # told it failed: it must have left nothing

    def _land(self, outcomes: dict[str, int | None]) -> None:
        txn_id, self.dtx = self.dtx, None
        assert txn_id is not None
        dtx = self.catalog.olympia.distributed_transaction(txn_id)
        try:
            version = dtx.commit()
            outcomes[self.tag] = None if version == dtx.record.beginning_version else version
        except (LocationInUseError, CommitConflict):
            with pytest.raises(NoSuchTransactionError):  # told it failed: it is aborted
                self.catalog.olympia.distributed_transaction(txn_id)


def _stage(bound: OlympiaCatalog, wh: str, op: Op) -> None:
    kind, name, arg = op
    try:
        if kind == "create":
            bound.create_table(("ns", name), SCHEMA, location=f"{wh}/{arg}")
        elif kind == "drop":
            bound.drop_table(("ns", name))
        elif kind == "rename":
            bound.rename_table(("ns", name), ("ns", arg))
        else:
            table = bound.load_table(("ns", name))
            bound.commit_table(table, (), (SetLocationUpdate(location=f"{wh}/{arg}"),))
    except (LocationInUseError, TableAlreadyExistsError, NoSuchTableError):
        pass  # refused at staging: nothing staged


def _no_two_share_files(snapshot: Snapshot) -> None:
    tables = [t for d in snapshot.load_all()[1] if (t := LiveTable.of(d)) is not None]
    index = LiveIndex()
    for table in tables:
        index.put(table.key, table)
    for table in tables:
        index.check_free(table.name, table.location, table.metadata_file, table.key)


def _history_holds(catalog: OlympiaCatalog, outcomes: dict[str, int | None]) -> None:
    """At no version do two live tables share files; each commit reported is in the
    history at its version, and nothing else is."""
    store = catalog.olympia
    found: dict[str, int] = {}
    for number in range(1, store.refresh() + 1):
        snapshot = store.at_version(number)
        _no_two_share_files(snapshot)
        found.update((a.info["test_tag"], number) for a in snapshot.actions()
                     if "test_tag" in a.info)
    assert found == {tag: v for tag, v in outcomes.items() if v is not None}


@settings(max_examples=30, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(writers=WRITERS, distributed=st.lists(st.booleans(), min_size=3, max_size=3),
       schedule=st.lists(st.integers(0, 2), min_size=6, max_size=16))
@example(writers=[[[("create", "c", "p")]], [[("relocate", "a", "p/q")]]],
         distributed=[False, False, False],
         schedule=[0, 1, 0, 1])  # the race of the deterministic test above
@example(writers=[[[("create", "c", "p/q")]], [[("create", "d", "p")]]],
         distributed=[True, False, False],
         schedule=[0, 1, 1, 0])  # a table lands outside before the transaction does
def test_racing_writers_never_leave_two_tables_sharing_files(
        tmp_path: Path, writers: list[list[list[Op]]], distributed: list[bool],
        schedule: list[int]) -> None:
    props = local_properties(tmp_path / uuid.uuid4().hex)
    setup = open_catalog(props, "setup")
    setup.create_namespace("ns")
    for name in SEEDED:
        setup.create_table(("ns", name), SCHEMA, location=f"{props['warehouse']}/u/{name}")
    running = [_Writer(open_catalog(props, f"w{i}"), props["warehouse"], todo, distributed[i])
               for i, todo in enumerate(writers)]
    outcomes: dict[str, int | None] = {}
    for turn in schedule:
        running[turn % len(running)].step(outcomes)
    for writer in running:  # then each finishes, in turn
        while writer.todo:
            writer.step(outcomes)
    _history_holds(setup, outcomes)
