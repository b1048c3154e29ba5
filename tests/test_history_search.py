"""History filtered by object and author: follows renames back to the creation, counts a
rollback only when it changed the object, and reads a bounded number of versions per page."""

from __future__ import annotations

from pathlib import Path

import pytest

from olympia import Catalog, versions
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.exceptions import InvalidArgumentError

COLS = [{"name": "id", "type": "int8"}]
U = ObjectRef(ObjectType.TABLE, "r", "u")


def build(path: Path) -> Catalog:
    """Versions 1-12; the table known today as r.u was created as s.t in version 3."""
    catalog = Catalog.create(str(path))
    steps = [
        ("ann", lambda t: t.create_namespace("s")),                                    # 1
        ("bob", lambda t: t.create_table("s", "t", columns=COLS)),                      # 2
        ("ann", lambda t: t.drop_table("s", "t")),                                      # 3
        ("bob", lambda t: t.create_table("s", "t", columns=COLS)),                      # 4: ours
        ("ann", lambda t: t.create_table("s", "other", columns=COLS)),                  # 5
        ("ann", lambda t: t.alter_table("s", "t", set_properties={"a": "1"})),          # 6
        ("bob", lambda t: t.rename_table("s.t", "u")),                                  # 7
        ("ann", lambda t: t.rename_namespace("s", "r")),                                # 8
        ("bob", lambda t: t.alter_table("r", "u", set_properties={"a": "2"})),          # 9
        ("ann", lambda t: t.drop_table("r", "other")),                                  # 10
    ]
    for user, step in steps:
        with catalog.transaction() as txn:
            txn.annotate(user=user)
            step(txn)
    versions.rollback(catalog, "previous", info={"user": "cy"})  # 11: other back; u as is
    versions.rollback(catalog, 8, info={"user": "cy"})  # 12: u loses a=2
    assert catalog.version == 12
    return catalog


def numbers(page: versions.HistoryPage) -> list[int]:
    return [v.version for v in page.versions]


def test_an_objects_history_follows_renames_to_its_creation(tmp_path: Path) -> None:
    catalog = build(tmp_path / "cat")
    page = versions.search_history(catalog, ref=U)
    assert numbers(page) == [12, 9, 8, 7, 6, 4]  # not 11 (it did not change u), not 2-3
    assert page.next_before is None  # its creation was found: nothing older is its
    assert [v.info["user"] for v in page.versions] == ["cy", "bob", "ann", "bob", "ann", "bob"]
    namespace = versions.search_history(catalog, ref=ObjectRef(ObjectType.NAMESPACE, "r"))
    assert numbers(namespace) == [8, 1]  # renamed from s, created as s
    other = versions.search_history(catalog, ref=ObjectRef(ObjectType.TABLE, "r", "other"),
                                    limit=2)
    assert numbers(other) == [11, 10]  # brought back by a rollback, after its drop


def test_pages_and_authors(tmp_path: Path) -> None:
    catalog = build(tmp_path / "cat")
    first = versions.search_history(catalog, ref=U, limit=2)
    assert numbers(first) == [12, 9] and first.next_before == 9
    second = versions.search_history(catalog, ref=U, limit=2, before=first.next_before)
    assert numbers(second) == [8, 7] and second.next_before == 7
    assert numbers(versions.search_history(catalog, ref=U, user="bob")) == [9, 7, 4]
    everyone = versions.search_history(catalog, user="ann")
    assert numbers(everyone) == [10, 8, 6, 5, 3, 1] and everyone.next_before is None


def test_a_page_reads_a_bounded_number_of_versions(tmp_path: Path) -> None:
    catalog = build(tmp_path / "cat")
    reads: list[int] = []
    at_version = catalog.at_version

    def counted(version: int) -> object:
        reads.append(version)
        return at_version(version)

    catalog.at_version = counted  # type: ignore[method-assign]
    page = versions.search_history(catalog, ref=U, user="bob", max_reads=3)
    assert numbers(page) == [] and page.next_before == 10 and page.oldest_read == 10
    assert sorted(set(reads)) == [10, 11, 12]  # a rollback's previous version is read too
    with pytest.raises(InvalidArgumentError):
        versions.search_history(catalog, limit=0)


def test_the_actions_that_wrote_an_object_and_its_name_before(tmp_path: Path) -> None:
    from olympia.catalog import actions
    from olympia.versions.history import object_actions

    catalog = build(tmp_path / "cat")
    name, seen = U, []
    for version in (9, 8, 7, 6, 5):
        done, name = object_actions(versions.history(catalog, 1, version + 1)[0], name)
        seen.append((version, [actions.describe(a) for a in done], str(name)))
    assert [(v, len(d), n) for v, d, n in seen] == [
        (9, 1, "r.u"), (8, 1, "s.u"), (7, 1, "s.t"), (6, 1, "s.t"), (5, 0, "s.t")]
    assert "rename" in seen[2][1][0] and "rename namespace s" in seen[1][1][0]


def test_a_diff_counts_its_objects_by_namespace_and_kind_from_the_keys(
        tmp_path: Path) -> None:
    catalog = build(tmp_path / "cat")
    counts = versions.diff(catalog, 5, 10).counts()
    # 6-10: t altered, renamed to u, s renamed to r (moving u and other), other dropped
    assert counts == {
        ("r", "namespace"): {"created": 1, "changed": 0, "dropped": 0},
        ("r", "table"): {"created": 1, "changed": 0, "dropped": 0},
        ("s", "namespace"): {"created": 0, "changed": 0, "dropped": 1},
        ("s", "table"): {"created": 0, "changed": 0, "dropped": 2}}
    assert versions.diff(catalog, 8, 9).counts() == {
        ("r", "table"): {"created": 0, "changed": 1, "dropped": 0}}
