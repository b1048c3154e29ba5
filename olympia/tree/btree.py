"""A copy-on-write B-tree of order N over immutable node files.

Reads walk immutable :class:`Node` objects fetched through a :class:`NodeStore` (a bounded
cache keyed by node file path: files never change, so a cached node is always right).
Writes go through a :class:`TreeWriter`: nodes on changed paths are copied into mutable
working nodes, split/borrowed/merged as a textbook B-tree, and :meth:`TreeWriter.flush`
gives new files only for those nodes; untouched subtrees keep their paths and are shared
with the previous version.

Invariants kept (spec "B-Tree"): all leaves at one depth; every node has at most N
children (N - 1 keys); every non-root node at least ceil(N/2) children (ceil(N/2) - 1 keys,
leaves included); an internal root has at least 2 children.

One module, over 400 lines, on purpose: reads, the copy-on-write writer and the validator share
the node invariants stated above, which are easiest to keep true side by side.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

from olympia.exceptions import CorruptFileError
from olympia.lru import LruCache
from olympia.storage import Storage
from olympia.tree.node import Node, decode_node, encode_node


def min_keys(order: int) -> int:
    """Fewest keys a non-root node may hold: ceil(order / 2) - 1."""
    return (order + 1) // 2 - 1


def new_node_path() -> str:
    return f"node/{uuid.uuid4()}.arrow"


class NodeStore:
    """Loads node files of one catalog through a bounded LRU cache of parsed nodes."""

    def __init__(self, storage: Storage, order: int, cache_size: int = 8192) -> None:
        self.storage = storage
        self.order = order
        self._cache: LruCache[str, Node] = LruCache(cache_size)

    def remember(self, path: str, node: Node) -> None:
        self._cache.put(path, node)

    def load(self, path: str) -> Node:
        node = self._cache.get(path)
        if node is None:
            node = decode_node(self.storage.read(path), self.storage.display(path), self.order)
            self.remember(path, node)
        return node

    def load_many(self, paths: list[str]) -> list[Node]:
        """Load several nodes, fetching the uncached ones as one batch
        (:meth:`~olympia.storage.Storage.map_requests`)."""
        missing = [p for p in dict.fromkeys(paths) if p not in self._cache]
        self.storage.map_requests(self.load, missing)
        return [self.load(p) for p in paths]


# --- reads over immutable nodes ---------------------------------------------------------


def check_placement(child: Node, lo: str | None, hi: str | None, parent: str) -> None:
    """Refuse a child whose keys are not all strictly between ``lo`` and ``hi``, the bounds
    its ancestors give it (None: unbounded); ``parent`` names the parent in the error.

    Every file may carry a valid checksum and still sit in the wrong place (two node files
    swapped): this is the cheap check made on every descent.
    """
    if child.keys and ((lo is not None and child.keys[0] <= lo)
                       or (hi is not None and child.keys[-1] >= hi)):
        raise CorruptFileError(
            child.source or "node",
            f"misplaced node: its keys {child.keys[0].rstrip()!r}..{child.keys[-1].rstrip()!r} "
            f"lie outside the range {_bound(lo)}..{_bound(hi)} that its parent {parent} "
            "gives it (node files swapped or overwritten?)")


def _bound(key: str | None) -> str:
    return "-inf" if key is None else repr(key.rstrip())


def _name(node: Node) -> str:
    return node.source or "root"


def _load_child(store: NodeStore, parent: Node, i: int, lo: str | None,
                hi: str | None) -> Node:
    """Child ``i`` of ``parent`` (whose own bounds are ``lo``/``hi``), placement checked."""
    assert parent.children is not None
    child = store.load(parent.children[i])
    bounds = (parent.keys[i - 1] if i > 0 else lo, parent.keys[i] if i < len(parent.keys) else hi)
    check_placement(child, *bounds, _name(parent))
    return child


def get(store: NodeStore, root: Node, key: str) -> str | None:
    """The value stored under ``key``, or None.

    Raises CorruptFileError for an unreadable or misplaced node on the way down.
    """
    node, lo, hi = root, None, None
    while True:
        i = bisect_left(node.keys, key)
        if i < len(node.keys) and node.keys[i] == key:
            return node.values[i]
        if node.children is None:
            return None
        child = _load_child(store, node, i, lo, hi)
        lo = node.keys[i - 1] if i > 0 else lo
        hi = node.keys[i] if i < len(node.keys) else hi
        node = child


def scan(
    store: NodeStore, root: Node, lo: str = "", hi: str | None = None
) -> Iterator[tuple[str, str]]:
    """Entries with ``lo <= key < hi`` in key order, reading only overlapping subtrees
    (as iterated: a node is read when the scan reaches it).

    Raises CorruptFileError for an unreadable or misplaced node, or siblings that are not
    all leaves or all internal nodes.
    """

    def walk(node: Node, low: str | None, high: str | None,
             ) -> Iterator[Iterable[tuple[str, str]]]:
        """The entries of ``node``'s subtree in runs (a leaf's in one, an internal
        node's one by one) that ``chain`` joins: a run, not each entry, passes up
        through the generators of every level."""
        first = bisect_left(node.keys, lo)
        if node.children is None:
            stop = len(node.keys) if hi is None else bisect_left(node.keys, hi, first)
            yield zip(node.keys[first:stop], node.values[first:stop], strict=True)
            return
        last = len(node.keys) if hi is None else bisect_left(node.keys, hi)
        children = store.load_many(list(node.children[first : last + 1]))
        bounds = [low, *node.keys, high]
        for offset, child in enumerate(children):
            i = first + offset
            check_placement(child, bounds[i], bounds[i + 1], _name(node))
            if child.is_leaf != children[0].is_leaf:
                raise CorruptFileError(child.source or "node", "a leaf beside an internal "
                                       f"node under {_name(node)}: leaves at different depths")
            yield from walk(child, bounds[i], bounds[i + 1])
            if i < last:
                yield ((node.keys[i], node.values[i]),)

    return chain.from_iterable(walk(root, None, None))


def prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix`` (None: unbounded)."""
    trimmed = prefix.rstrip("\U0010ffff")
    if not trimmed:
        return None
    return trimmed[:-1] + chr(ord(trimmed[-1]) + 1)


def scan_prefix(store: NodeStore, root: Node, prefix: str) -> Iterator[tuple[str, str]]:
    return scan(store, root, prefix, prefix_end(prefix))


def depth(store: NodeStore, root: Node) -> int:
    """Number of levels, root included."""
    levels, node = 1, root
    while node.children is not None:
        node = store.load(node.children[0])
        levels += 1
    return levels


def node_paths(store: NodeStore, root: Node) -> Iterator[str]:
    """Paths of every non-root node file reachable from ``root``, level by level."""
    level = list(root.children or ())
    while level:
        yield from level
        nodes = store.load_many(level)
        level = [c for n in nodes for c in (n.children or ())]


def validate(store: NodeStore, root: Node, order: int) -> int:
    """Check every B-tree invariant below ``root``; return the number of entries.

    Raises CorruptFileError naming the offending node.
    """
    low = min_keys(order)
    leaf_depths: set[int] = set()

    def check(node: Node, name: str, level: int, lo: str | None, hi: str | None) -> int:
        n = len(node.keys)
        if n > order - 1:
            raise CorruptFileError(name, f"{n} keys exceed order {order}")
        if level > 0 and n < low:
            raise CorruptFileError(name, f"{n} keys, fewer than the minimum {low}")
        if level == 0 and node.children is not None and n < 1:
            raise CorruptFileError(name, "internal root with fewer than 2 children")
        if list(node.keys) != sorted(set(node.keys)):
            raise CorruptFileError(name, "keys not strictly increasing")
        if node.keys and ((lo is not None and node.keys[0] <= lo)
                          or (hi is not None and node.keys[-1] >= hi)):
            raise CorruptFileError(name, "key outside the range its parent allows")
        if node.children is None:
            leaf_depths.add(level)
            if len(leaf_depths) > 1:
                raise CorruptFileError(name, "leaves at different depths")
            return n
        bounds = [lo, *node.keys, hi]
        total = n
        for i, path in enumerate(node.children):
            total += check(store.load(path), store.storage.display(path), level + 1,
                           bounds[i], bounds[i + 1])
        return total

    return check(root, "root", 0, None, None)


# --- copy-on-write writes ----------------------------------------------------------------


class _Work:
    """A mutable node in a writer's working tree; ``path`` None means changed (dirty)."""

    __slots__ = ("children", "keys", "path", "values")

    def __init__(
        self,
        keys: list[str],
        values: list[str],
        children: list[_Work | str] | None,
        path: str | None,
    ) -> None:
        self.keys = keys
        self.values = values
        self.children = children
        self.path = path

    @classmethod
    def of(cls, node: Node, path: str | None) -> _Work:
        children = None if node.children is None else list[_Work | str](node.children)
        return cls(list(node.keys), list(node.values), children, path)


NodeShape = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]
"""A node's content apart from its creation time: keys, values, children."""


def shape(node: Node) -> NodeShape:
    return node.keys, node.values, node.children


@dataclass(frozen=True)
class FlushResult:
    """Outcome of :meth:`TreeWriter.flush`: the new root's pivot table, the new node files
    and the paths of the node files it reuses (``reuse`` of :meth:`TreeWriter.flush`)."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    children: tuple[str, ...] | None
    files: dict[str, Node]
    reused: frozenset[str] = frozenset()


class TreeWriter:
    """Applies puts and deletes to a tree copy-on-write."""

    def __init__(self, store: NodeStore, root: Node) -> None:
        self.store = store
        self.order = store.order
        self.min_keys = min_keys(self.order)
        self.root = _Work.of(root, None)

    def _child(self, node: _Work, i: int) -> _Work:
        assert node.children is not None
        child = node.children[i]
        if isinstance(child, str):
            loaded = self.store.load(child)
            check_placement(loaded, node.keys[i - 1] if i > 0 else None,
                            node.keys[i] if i < len(node.keys) else None, node.path or "root")
            child = _Work.of(loaded, child)
            node.children[i] = child
        return child

    @staticmethod
    def _dirty(*nodes: _Work) -> None:
        for node in nodes:
            node.path = None

    def put(self, key: str, value: str) -> None:
        """Insert or replace ``key``."""
        stack: list[tuple[_Work, int]] = []
        node = self.root
        while True:
            i = bisect_left(node.keys, key)
            if i < len(node.keys) and node.keys[i] == key:
                node.values[i] = value
                self._dirty(node, *(n for n, _ in stack))
                return
            if node.children is None:
                node.keys.insert(i, key)
                node.values.insert(i, value)
                break
            stack.append((node, i))
            node = self._child(node, i)
        self._dirty(node, *(n for n, _ in stack))
        while len(node.keys) > self.order - 1:
            mid = (len(node.keys) - 1) // 2
            right = _Work(
                node.keys[mid + 1 :],
                node.values[mid + 1 :],
                None if node.children is None else node.children[mid + 1 :],
                None,
            )
            up_key, up_value = node.keys[mid], node.values[mid]
            del node.keys[mid:], node.values[mid:]
            if node.children is not None:
                del node.children[mid + 1 :]
            if stack:
                parent, i = stack.pop()
                parent.keys.insert(i, up_key)
                parent.values.insert(i, up_value)
                assert parent.children is not None
                parent.children.insert(i + 1, right)
                node = parent
            else:
                self.root = _Work([up_key], [up_value], [node, right], None)
                return

    def delete(self, key: str) -> bool:
        """Remove ``key``; return False if it was not there."""
        stack: list[tuple[_Work, int]] = []
        node = self.root
        while True:
            i = bisect_left(node.keys, key)
            if i < len(node.keys) and node.keys[i] == key:
                break
            if node.children is None:
                return False
            stack.append((node, i))
            node = self._child(node, i)
        if node.children is None:
            del node.keys[i], node.values[i]
        else:  # replace with the predecessor, then remove that from its leaf
            target, ti = node, i
            stack.append((node, i))
            node = self._child(node, i)
            while node.children is not None:
                last = len(node.children) - 1
                stack.append((node, last))
                node = self._child(node, last)
            target.keys[ti], target.values[ti] = node.keys.pop(), node.values.pop()
        self._dirty(node, *(n for n, _ in stack))
        while stack and len(node.keys) < self.min_keys:
            parent, i = stack.pop()
            self._rebalance(parent, i, node)
            node = parent
        if self.root.children is not None and not self.root.keys:
            self.root = self._child(self.root, 0)
        return True

    def _rebalance(self, parent: _Work, i: int, node: _Work) -> None:
        """Fix an underfull child ``i`` of ``parent`` by borrowing or merging."""
        assert parent.children is not None
        if i > 0:
            left = self._child(parent, i - 1)
            if len(left.keys) > self.min_keys:
                node.keys.insert(0, parent.keys[i - 1])
                node.values.insert(0, parent.values[i - 1])
                parent.keys[i - 1], parent.values[i - 1] = left.keys.pop(), left.values.pop()
                if node.children is not None:
                    assert left.children is not None
                    node.children.insert(0, left.children.pop())
                self._dirty(left)
                return
        if i < len(parent.children) - 1:
            right = self._child(parent, i + 1)
            if len(right.keys) > self.min_keys:
                node.keys.append(parent.keys[i])
                node.values.append(parent.values[i])
                parent.keys[i], parent.values[i] = right.keys.pop(0), right.values.pop(0)
                if node.children is not None:
                    assert right.children is not None
                    node.children.append(right.children.pop(0))
                self._dirty(right)
                return
        if i > 0:  # merge node into its left sibling
            i -= 1
            left, right = self._child(parent, i), node
        else:  # merge the right sibling into node
            left, right = node, self._child(parent, i + 1)
        left.keys += [parent.keys[i], *right.keys]
        left.values += [parent.values[i], *right.values]
        if left.children is not None:
            assert right.children is not None
            left.children += right.children
        del parent.keys[i], parent.values[i], parent.children[i + 1]
        self._dirty(left)

    def flush(
        self, created_at_millis: int, new_path: Callable[[], str] = new_node_path,
        reuse: Mapping[NodeShape, str] | None = None,
    ) -> FlushResult:
        """Assign new paths to changed non-root nodes; return the root and the new files.

        ``reuse`` maps the shape of node files already written (by an earlier attempt of
        the same commit) to their paths: a changed node of the same shape takes that path
        and is not among the new files, but among the reused ones.
        """
        files: dict[str, Node] = {}
        reused: set[str] = set()

        def settle(node: _Work | str) -> str:
            if isinstance(node, str):
                return node
            if node.path is not None:  # unchanged: every descendant is unchanged too
                return node.path
            built = self._build(node, settle, created_at_millis)
            known = reuse.get(shape(built)) if reuse else None
            node.path = known or new_path()
            if known is None:
                files[node.path] = built
            else:
                reused.add(known)
            return node.path

        root = self._build(self.root, settle, created_at_millis)
        return FlushResult(root.keys, root.values, root.children, files, frozenset(reused))

    @staticmethod
    def _build(node: _Work, settle: Callable[[_Work | str], str], created: int) -> Node:
        children = None if node.children is None else tuple(settle(c) for c in node.children)
        return Node(tuple(node.keys), tuple(node.values), children, created)


def encode_files(files: dict[str, Node], order: int) -> dict[str, bytes]:
    return {path: encode_node(node, order) for path, node in files.items()}


def diff(store: NodeStore, old: Node, new: Node) -> Iterator[tuple[str, str | None, str | None]]:
    """Entries that differ between two trees, in key order: (key, old value, new value).

    Both trees are expanded lazily into key-ordered streams of entries and unexpanded
    subtrees; a subtree whose node file path appears at the same point of both streams is
    identical and skipped unread, so the cost follows the size of the change.
    """
    # stream items: ("entry", key, value) or ("tree", path, height); roots are expanded first
    def expand(node: Node, height: int) -> list[tuple[str, str, Any]]:
        items: list[tuple[str, str, Any]] = []
        for i, key in enumerate(node.keys):
            if node.children is not None:
                items.append(("tree", node.children[i], height - 1))
            items.append(("entry", key, node.values[i]))
        if node.children is not None:
            items.append(("tree", node.children[-1], height - 1))
        return items

    a = expand(old, depth(store, old))
    b = expand(new, depth(store, new))
    a.reverse()
    b.reverse()  # pop() from the end = take from the front of the stream
    while a or b:
        x = a[-1] if a else None
        y = b[-1] if b else None
        if x is not None and y is not None and x[0] == y[0] == "tree" and x[1] == y[1]:
            a.pop()
            b.pop()
            continue
        # expand the higher subtree at the front (both when equally high)
        x_tree = x is not None and x[0] == "tree"
        y_tree = y is not None and y[0] == "tree"
        if x_tree or y_tree:
            hx = x[2] if x_tree and x is not None else -1
            hy = y[2] if y_tree and y is not None else -1
            if x_tree and x is not None and hx >= hy:
                a.pop()
                a.extend(reversed(expand(store.load(x[1]), hx)))
            if y_tree and y is not None and hy >= hx:
                b.pop()
                b.extend(reversed(expand(store.load(y[1]), hy)))
            continue
        if y is None or (x is not None and x[1] < y[1]):
            assert x is not None
            a.pop()
            yield x[1], x[2], None
        elif x is None or y[1] < x[1]:
            b.pop()
            yield y[1], None, y[2]
        else:
            a.pop()
            b.pop()
            if x[2] != y[2]:
                yield x[1], x[2], y[2]
