"""A kept catalog version stays readable (olympia/iceberg/retention.py), checked against a
brute-force oracle: random appends, tags, snapshot expiries, retention settings,
``write.metadata.previous-versions-max`` values and catalog rollbacks on one table, after
each of which every kept version (found by walking them all) is compared with what the table's
current metadata reaches — which is all Iceberg's orphan-file removal looks at."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows
from pyiceberg.table import Table

from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.retention import Heads, KeptSnapshotError, kept_versions
from olympia.versions import export, rollback
from olympia.versions.policy import ExpirePolicy, save_defaults

STEPS = st.lists(st.one_of(
    st.tuples(st.just("append")),
    st.tuples(st.just("expire"), st.integers(0, 20)),
    st.tuples(st.just("tag"), st.integers(0, 20)),
    st.tuples(st.just("untag")),
    st.tuples(st.just("keep-last"), st.integers(1, 4)),
    st.tuples(st.just("previous-versions-max"), st.integers(1, 3)),
    st.tuples(st.just("export")),
    st.tuples(st.just("rollback"), st.integers(1, 3)),
), min_size=1, max_size=14)


def kept_files(ice: OlympiaCatalog, uuid: str) -> dict[int, str]:
    """Every kept version's metadata file of the table (walking each kept version)."""
    store = ice.olympia
    kept = kept_versions(store)
    found = {}
    for version in [*range(kept.start, kept.latest + 1), *kept.pinned]:
        past = store.at_version(version)
        if past.table_exists(("ns", "t")):
            definition = past.load_table(("ns", "t"))
            if definition.format_properties.get("table-uuid") == uuid:
                found[version] = definition.location
    return found


def heads(ice: OlympiaCatalog, location: str) -> set[int]:
    return set(Heads.of(ice._read_metadata(location, "ns.t")).refs)


def check_reachable(ice: OlympiaCatalog, table: Table) -> None:
    """Every kept version's metadata file is the current one or in its metadata-log, and its
    heads are snapshots the current metadata lists."""
    current = ice.load_table("ns.t")
    reached = {e.metadata_file for e in current.metadata.metadata_log}
    reached.add(current.metadata_location)
    listed = {s.snapshot_id for s in current.metadata.snapshots}
    for version, location in kept_files(ice, str(table.metadata.table_uuid)).items():
        assert location in reached, f"version {version}: {location} unreachable"
        assert heads(ice, location) <= listed, f"version {version} lost a head"


def run(steps: list[tuple[Any, ...]], root: Path) -> None:
    ice = open_catalog(local_properties(root))
    ice.create_namespace("ns")
    table = ice.create_table("ns.t", SCHEMA)
    table.append(rows(0))
    first = ice.olympia.refresh()  # rollbacks go no further back than the first append
    save_defaults(ice.olympia, ExpirePolicy(keep_last=3, older_than_ms=0, force=True))
    rolled_back, tags, exports = False, 0, 0
    for step in steps:
        table = ice.load_table("ns.t")
        metadata = table.metadata
        snapshots = [s.snapshot_id for s in metadata.snapshots]
        if step[0] == "append":
            table.append(rows(len(snapshots) * 3))
        elif step[0] == "tag" and snapshots:
            tags += 1
            table.manage_snapshots().create_tag(snapshots[step[1] % len(snapshots)],
                                                f"t{tags}").commit()
        elif step[0] == "untag" and len(metadata.refs) > 1:
            name = sorted(r for r in metadata.refs if r != "main")[0]
            table.manage_snapshots().remove_tag(name).commit()
        elif step[0] == "keep-last":
            save_defaults(ice.olympia, ExpirePolicy(keep_last=step[1], older_than_ms=0,
                                                    force=True))
        elif step[0] == "previous-versions-max":
            with table.transaction() as txn:
                txn.set_properties({"write.metadata.previous-versions-max": str(step[1])})
        elif step[0] == "export":
            exports += 1
            export(ice.olympia, f"e{exports}", str(root / f"export{exports}"), "minimal")
        elif step[0] == "rollback":
            latest = ice.olympia.refresh()
            if latest - step[1] >= first:
                rollback(ice.olympia, latest - step[1])
                rolled_back = True
        elif step[0] == "expire":
            heads_now = {ref.snapshot_id for ref in metadata.refs.values()}
            candidates = [s for s in snapshots if s not in heads_now]
            if not candidates:
                continue
            victim = candidates[step[1] % len(candidates)]
            needed = set().union(*(heads(ice, f) for f in kept_files(
                ice, str(metadata.table_uuid)).values()))
            before = ice.olympia.refresh()
            try:
                table.maintenance.expire_snapshots().by_id(victim).commit()
            except KeptSnapshotError:
                assert ice.olympia.refresh() == before
                # refused exactly when needed; after a rollback it may fail closed
                assert victim in needed or rolled_back
            else:
                # after a rollback, versions off the table's lineage are not protected
                # (docs/ICEBERG.md, what is not guaranteed)
                assert victim not in needed or rolled_back, "a kept version lost a head"
        if not rolled_back:
            check_reachable(ice, table)
    ice.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_kept_versions_stay_reachable(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        run(steps, Path(root))


def test_a_snapshot_a_tag_of_a_kept_version_reads_is_refused(tmp_path: Path) -> None:
    ice = open_catalog(local_properties(tmp_path))
    ice.create_namespace("ns")
    table = ice.create_table("ns.t", SCHEMA)
    table.append(rows(0))
    first = table.metadata.current_snapshot_id
    assert first is not None
    table.manage_snapshots().create_tag(first, "audit").commit()
    table.append(rows(3))
    table.manage_snapshots().remove_tag("audit").commit()
    with table.transaction() as txn:  # a table renamed since keeps its uuid and versions
        txn.set_properties({"write.metadata.previous-versions-max": "1"})
    ice.rename_table("ns.t", "ns.renamed")
    table = ice.load_table("ns.renamed")
    with pytest.raises(KeptSnapshotError, match=f"snapshot {first}: catalog versions .* "
                                                "read it as audit, main"):
        table.maintenance.expire_snapshots().by_id(first).commit()
