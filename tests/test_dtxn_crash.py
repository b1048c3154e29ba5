"""Crashes inside distributed transactions (issue 45), with real processes and real SIGKILL:
a writer process killed in the middle of a statement. Nothing is half-visible, the
transaction stays resumable or abortable, and `olympia verify` passes.

The kill lands at a moment drawn from a seeded generator (timings vary from run to run);
every assertion holds whatever the moment was.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from cli_helpers import Cli
from conftest import Location

from olympia import Catalog
from olympia.catalog.actions import A
from olympia.catalog.distributed import TRANSACTION_ID, TRANSACTION_INSTANCE
from olympia.catalog.keys import dtxn_path
from olympia.exceptions import NoSuchTransactionError
from olympia.versions import history

COLS = [{"name": "id", "type": "int8"}]
WAIT_S = 60.0  # how long a phase may take before the test gives up (never an assertion)

# Statement ``seq`` of transaction ``txn`` creates two tables and sets a property of an
# existing one; it prints ``seq`` once the statement is acknowledged (added to the record).
WRITER = textwrap.dedent("""
    import json, sys
    from olympia import Catalog

    uri, options, txn, first = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    catalog = Catalog.open(uri, options)
    for seq in range(first, first + 100000):
        with catalog.transaction(name=txn) as stmt:
            stmt.create_table("s", f"{txn}_a{seq:04d}", columns=[{"name": "id", "type": "int8"}])
            stmt.create_table("s", f"{txn}_b{seq:04d}", columns=[{"name": "id", "type": "int8"}])
            stmt.alter_table("s.orders", set_properties={txn: str(seq)})
        print(seq, flush=True)
""")


def _cli(location: Location) -> Cli:
    return Cli({"OLYMPIA_STORAGE_OPTIONS": json.dumps(location.storage_options),
                "OLYMPIA_CATALOG": None})


def _verified(location: Location) -> None:
    """``olympia verify`` passes on the catalog's latest version."""
    result = _cli(location)("verify", "-c", location.uri)
    assert result.exit_code == 0 and result.output.startswith("OK: version"), result.output


def _landed(catalog: Catalog, instance: str) -> list[int]:
    """The versions carrying the annotation ``transaction_instance=instance``."""
    catalog.refresh()
    return [entry.version for entry in history(catalog, limit=catalog.version + 1)
            if entry.info.get(TRANSACTION_INSTANCE) == instance]


# --- a writer killed in the middle of a statement -------------------------------------------


def _kill_writer(location: Location, txn: str, first: int, acks: int,
                 fraction: float) -> list[int]:
    """Run a writer adding statements ``first, first + 1, ...`` to ``txn``; SIGKILL it
    ``fraction`` of a statement's time after its ``acks``-th acknowledgement. Returns the
    statements it acknowledged."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, location.uri, json.dumps(location.storage_options),
         txn, str(first)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=os.environ.copy())
    assert proc.stdout is not None and proc.stderr is not None
    acked: list[int] = []
    stamps: list[float] = []
    try:
        for line in proc.stdout:
            acked.append(int(line))
            stamps.append(time.monotonic())
            if len(acked) == acks:
                break
        if len(stamps) == acks:
            time.sleep(fraction * (stamps[-1] - stamps[0]) / (acks - 1))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    acked += [int(line) for line in proc.stdout.read().split()]  # printed before it died
    errors = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL and len(acked) >= acks, errors
    return acked


def _check_open_transaction(location: Location, txn: str, began: int, acked: set[int],
                            in_flight: int) -> set[int]:
    """After a writer's death: the record is readable and OPEN, its view holds every
    acknowledged statement and each statement whole or not at all (only the one in flight
    may be there unacknowledged), and nothing is visible outside. Returns the statements
    in the view."""
    _verified(location)
    reader = Catalog.open(location.uri, location.storage_options)
    assert reader.version == began
    dtx = reader.distributed_transaction(txn)
    assert dtx.state == "open"
    view = dtx.view()
    tables = view.list_tables("s")
    firsts = {int(t.removeprefix(f"{txn}_a")) for t in tables if t.startswith(f"{txn}_a")}
    seconds = {int(t.removeprefix(f"{txn}_b")) for t in tables if t.startswith(f"{txn}_b")}
    assert firsts == seconds  # both tables of a statement, or neither
    assert acked <= firsts <= acked | {in_flight}
    assert view.load_table("s.orders").properties.get(txn) == (
        str(max(firsts)) if firsts else None)
    kinds = [a.type for a in dtx.staged_actions()]  # the record's actions match its tree
    assert (kinds.count(A.TABLE_CREATE), kinds.count(A.TABLE_ALTER_SET_PROPERTIES)) == (
        2 * len(firsts), len(firsts))
    assert reader.list_tables("s") == ["orders"]
    assert txn not in reader.load_table("s.orders").properties
    return firsts


@pytest.mark.parametrize("seed", [45])
def test_a_writer_killed_mid_statement_leaves_the_transaction_whole(
        shared_location: Location, seed: int) -> None:
    """Writer processes are killed in the middle of statements of two transactions, round
    after round: after each kill the transaction is OPEN and holds exactly the statements
    that were added, each whole; then one commits as ONE version and the other aborts."""
    rng = random.Random(seed)
    catalog = Catalog.create(shared_location.uri, shared_location.storage_options)
    catalog.create_namespace("s")
    catalog.create_table("s", "orders", columns=COLS)
    began = catalog.version
    kept, dropped = catalog.begin_transaction("keep"), catalog.begin_transaction("drop")
    held: dict[str, set[int]] = {"keep": set(), "drop": set()}
    rounds = 4 if shared_location.kind == "local" else 2
    for turn in range(rounds):
        txn = ("keep", "drop")[turn % 2]
        first = max(held[txn], default=-1) + 2  # past the one that may be in flight
        acked = _kill_writer(shared_location, txn, first, rng.choice([2, 3]),
                             rng.uniform(0.0, 1.2))
        in_flight = max(acked) + 1
        held[txn] = _check_open_transaction(shared_location, txn, began,
                                            held[txn] | set(acked), in_flight)

    with catalog.transaction(name="keep") as stmt:  # it still takes statements
        stmt.create_table("s", "keep_last", columns=COLS)
    cli = _cli(shared_location)
    committed = cli("txn", "commit", "-c", shared_location.uri, "keep", "--json")
    assert committed.exit_code == 0, committed.output
    assert json.loads(committed.output)["version"] == began + 1
    aborted = cli("txn", "abort", "-c", shared_location.uri, "drop")
    assert aborted.exit_code == 0, aborted.output

    reader = Catalog.open(shared_location.uri, shared_location.storage_options)
    assert reader.version == began + 1  # ONE version, and nothing of the aborted one
    assert _landed(reader, kept.record.instance) == [began + 1]
    assert _landed(reader, dropped.record.instance) == []
    expected = {f"keep_{c}{seq:04d}" for seq in held["keep"] for c in "ab"}
    assert set(reader.list_tables("s")) == expected | {"keep_last", "orders"}
    assert reader.load_table("s.orders").properties == {"keep": str(max(held["keep"]))}
    (entry,) = history(reader, limit=1)
    assert entry.info[TRANSACTION_ID] == "keep"
    for txn in ("keep", "drop"):
        assert not reader.storage.exists(dtxn_path(txn))
        with pytest.raises(NoSuchTransactionError):
            reader.distributed_transaction(txn)
    _verified(shared_location)
