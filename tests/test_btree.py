"""Property-based B-tree tests against a dict model, across orders and reopen from storage."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olympia.exceptions import CorruptFileError
from olympia.storage import Storage
from olympia.tree import btree
from olympia.tree.node import Node, decode_node, encode_node

_counter = itertools.count()

keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
ops = st.lists(
    st.tuples(st.sampled_from(["put", "put", "delete"]), keys, st.integers(0, 99)),
    max_size=120,
)


def commit(store: btree.NodeStore, root: Node, ops_: list[tuple[str, str, int]]) -> Node:
    """Apply ops through a TreeWriter, write the new files, return the new root node."""
    writer = btree.TreeWriter(store, root)
    for op, key, value in ops_:
        if op == "put":
            writer.put(key, str(value))
        else:
            writer.delete(key)
    result = writer.flush(created_at_millis=1)
    store.storage.write_many(btree.encode_files(result.files, store.order))
    root = Node(result.keys, result.values, result.children, 1, catalog_def="def/c")
    # the root goes through the codec too, as it would on disk
    return decode_node(encode_node(root, store.order), "root", store.order, root=True)


@pytest.mark.parametrize("order", [3, 4, 5, 6, 7, 8])
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(ops, min_size=1, max_size=4))
def test_matches_dict_model(order: int, batches: list[list[tuple[str, str, int]]]) -> None:
    storage = Storage(f"memory://btree-{next(_counter)}")
    store = btree.NodeStore(storage, order)
    root = Node((), (), None, 0, catalog_def="def/c")
    model: dict[str, str] = {}
    for batch in batches:
        root = commit(store, root, batch)
        for op, key, value in batch:
            if op == "put":
                model[key] = str(value)
            else:
                model.pop(key, None)
        # a cold store reads everything back from storage
        cold = btree.NodeStore(storage, order)
        assert btree.validate(cold, root, order) == len(model)
        assert dict(btree.scan(cold, root)) == model
        assert list(btree.scan(cold, root)) == sorted(model.items())
        for key in ["a", "b", "ab", "hhh", "zz"]:
            assert btree.get(cold, root, key) == model.get(key)
        lo, hi = "b", "d"
        assert list(btree.scan(cold, root, lo, hi)) == sorted(
            (k, v) for k, v in model.items() if lo <= k < hi
        )
        assert list(btree.scan_prefix(cold, root, "a")) == sorted(
            (k, v) for k, v in model.items() if k.startswith("a")
        )


def test_copy_on_write_writes_one_path() -> None:
    order = 4
    storage = Storage("memory://btree-cow")
    store = btree.NodeStore(storage, order)
    root = commit(store, Node((), (), None, 0), [("put", f"k{i:04d}", i) for i in range(500)])
    depth = btree.depth(store, root)
    assert depth >= 4
    before = set(btree.node_paths(store, root))
    writer = btree.TreeWriter(store, root)
    writer.put("k0250", "changed")
    result = writer.flush(2)
    assert len(result.files) == depth - 1  # one new node per level below the root
    store.storage.write_many(btree.encode_files(result.files, order))
    new_root = Node(result.keys, result.values, result.children, 2)
    after = set(btree.node_paths(store, new_root))
    assert len(after - before) == depth - 1
    assert btree.get(store, new_root, "k0250") == "changed"
    assert btree.get(store, root, "k0250") == "250"  # the old version is untouched


@settings(max_examples=60, deadline=None)
@given(first=ops, second=ops, order=st.integers(3, 6))
def test_diff_matches_dict_model(first: list[tuple[str, str, int]],
                                 second: list[tuple[str, str, int]], order: int) -> None:
    storage = Storage(f"memory://diff-{next(_counter)}")
    store = btree.NodeStore(storage, order)
    a = commit(store, Node((), (), None, 0, catalog_def="def/c"), first)
    b = commit(store, a, second)
    old, new = dict(btree.scan(store, a)), dict(btree.scan(store, b))
    expected = [(k, old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys())
                if old.get(k) != new.get(k)]
    assert list(btree.diff(store, a, b)) == expected
    assert [(k, n, o) for k, o, n in expected] == list(btree.diff(store, b, a))


def test_diff_reads_only_changed_paths() -> None:
    order = 4
    storage = Storage("memory://diff-cost")
    store = btree.NodeStore(storage, order)
    a = commit(store, Node((), (), None, 0), [("put", f"k{i:05d}", i) for i in range(3000)])
    b = commit(store, a, [("put", "k01500", 7)])
    levels = btree.depth(store, a)
    cold = btree.NodeStore(storage, order)
    storage.stats.reset()
    assert list(btree.diff(cold, a, b)) == [("k01500", "1500", "7")]
    # the two changed paths plus the leftmost paths read to learn each tree's height
    assert storage.stats.reads <= 4 * levels


def swapped_tree() -> tuple[btree.NodeStore, Node, str, str]:
    """A tree of order 4 whose first and last leaf files have exchanged contents; both
    still carry valid checksums."""
    storage = Storage(f"memory://btree-swap-{next(_counter)}")
    store = btree.NodeStore(storage, 4)
    root = commit(store, Node((), (), None, 0), [("put", f"k{i:03d}", i) for i in range(40)])
    paths = list(btree.node_paths(store, root))
    leaves = [p for p in paths if store.load(p).is_leaf]
    first, last = leaves[0], leaves[-1]
    a, b = storage.read(first), storage.read(last)
    storage.write(first, b)
    storage.write(last, a)
    return btree.NodeStore(storage, 4), root, first, last


def test_swapped_leaves_are_refused_on_every_descent() -> None:
    store, root, first, last = swapped_tree()
    with pytest.raises(CorruptFileError, match=f"{first}: misplaced node.*its parent memory://.*/node/"):
        btree.get(store, root, "k000")
    with pytest.raises(CorruptFileError, match="misplaced node"):
        list(btree.scan(store, root))
    with pytest.raises(CorruptFileError, match=f"{last}: misplaced node"):
        list(btree.scan_prefix(store, root, "k039"))
    writer = btree.TreeWriter(store, root)
    with pytest.raises(CorruptFileError, match="misplaced node"):
        writer.put("k0001", "x")
    with pytest.raises(CorruptFileError, match="misplaced node"):
        btree.TreeWriter(store, root).delete("k039")
    # keys in untouched leaves still read
    assert btree.get(store, root, "k020") == "20"


def test_leaf_beside_internal_node_is_refused() -> None:
    storage = Storage(f"memory://btree-depth-{next(_counter)}")
    store = btree.NodeStore(storage, 3)
    leaf = Node(("a",), ("1",), None, 1)
    inner = Node(("m",), ("2",), ("node/l2.arrow", "node/l3.arrow"), 1)
    storage.write_many({"node/l1.arrow": encode_node(leaf, 3),
                        "node/l2.arrow": encode_node(Node(("k",), ("3",), None, 1), 3),
                        "node/l3.arrow": encode_node(Node(("p",), ("4",), None, 1), 3),
                        "node/i.arrow": encode_node(inner, 3)})
    root = Node(("c",), ("5",), ("node/l1.arrow", "node/i.arrow"), 1, catalog_def="def/c")
    with pytest.raises(CorruptFileError, match="leaves at different depths"):
        list(btree.scan(store, root))
