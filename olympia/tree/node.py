"""Node files: one B-tree node as an Arrow IPC file (FORMAT-DECISIONS rulings 2-3).

Layout of the single record batch (schema ``key: utf8, value: utf8, pnode: utf8``):

1. system rows (pnode NULL): ``created_at_millis`` and ``n_keys`` in every node; a root
   also has ``catalog_def``, ``previous_root`` (not at version 0) and ``rollback_from_root``
   (only in a root written by a rollback);
2. exactly ``order`` pivot rows: row 0 is (NULL, NULL, leftmost child), rows 1..n_keys are
   (key, value, right child), the rest are all NULL; children are NULL in a leaf;
3. root only: one (object key, base64 ActionDef, NULL) row per action of its transaction.

Ruling 13: the schema's custom metadata carries ``olympia.rows.sha256``, the SHA-256 of the
rows (see :func:`rows_digest`), written on every encode and checked on every parse; a file
without the key (written before the ruling) is read unverified.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.ipc as ipc

from olympia.exceptions import CorruptFileError

SCHEMA = pa.schema(
    [pa.field("key", pa.utf8()), pa.field("value", pa.utf8()), pa.field("pnode", pa.utf8())]
)

CREATED_AT = "created_at_millis"
N_KEYS = "n_keys"
CATALOG_DEF = "catalog_def"
PREVIOUS_ROOT = "previous_root"
ROLLBACK_FROM_ROOT = "rollback_from_root"
ROOT_ONLY_KEYS = (CATALOG_DEF, PREVIOUS_ROOT, ROLLBACK_FROM_ROOT)
SYSTEM_KEYS = (CREATED_AT, N_KEYS, *ROOT_ONLY_KEYS)
CHECKSUM_KEY = b"olympia.rows.sha256"


def rows_digest(keys: Sequence[str | None], values: Sequence[str | None],
                pnodes: Sequence[str | None]) -> str:
    """SHA-256 (64 lowercase hex digits) of a node's rows, in row order: each cell of a row
    (key, value, pnode) is ``00`` for NULL, else ``01``, its UTF-8 length as 4 big-endian
    bytes, then its UTF-8 bytes."""
    rows = map(_ROWS.__getitem__, zip(keys, values, pnodes, strict=True))
    return hashlib.sha256(b"".join(rows)).hexdigest()


Row = tuple[str | None, str | None, str | None]


class _Rows(dict[Row, bytes]):
    """Encoded rows by content: the same rows recur in every node a writer encodes or reads
    (the padding rows, and pivot rows a new version did not change: each attempt of a
    commit re-encodes its leaf, every writer reads the roots of the others), so most rows
    are encoded once and looked up without a Python call. Bounded: emptied when full
    (:data:`_ROWS_MAX`)."""

    def __missing__(self, row: Row) -> bytes:
        encoded = b"".join(
            b"\x00" if cell is None else _length_prefixed(cell.encode("utf-8")) for cell in row)
        if len(self) >= _ROWS_MAX:
            self.clear()
        self[row] = encoded
        return encoded


def _length_prefixed(raw: bytes) -> bytes:
    return b"\x01" + len(raw).to_bytes(4, "big") + raw


_ROWS = _Rows()
_ROWS_MAX = 32_768


@dataclass(frozen=True)
class Node:
    """A parsed node. ``children`` is None for a leaf, else has ``len(keys) + 1`` paths;
    ``source`` names the file it was read from (empty for a node built in memory)."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    children: tuple[str, ...] | None
    created_at_millis: int
    catalog_def: str | None = None
    previous_root: str | None = None
    rollback_from_root: str | None = None
    actions: tuple[tuple[str, str], ...] = ()
    source: str = field(default="", compare=False)

    @property
    def is_leaf(self) -> bool:
        return self.children is None


@dataclass(frozen=True)
class NodeFile:
    """The raw rows of a node file, before the pivot table is interpreted."""

    path: str
    keys: list[str | None]
    values: list[str | None]
    pnodes: list[str | None]

    def system_rows(self) -> dict[str, str]:
        """The system rows at the top of the file (readable without knowing the order)."""
        system: dict[str, str] = {}
        for key, value, pnode in zip(self.keys, self.values, self.pnodes, strict=True):
            if key is None:
                break
            if key not in SYSTEM_KEYS:
                raise CorruptFileError(self.path, f"unknown system key {key!r} before pivot rows")
            if key in system:
                raise CorruptFileError(self.path, f"duplicate system key {key!r}")
            if value is None or pnode is not None:
                raise CorruptFileError(self.path, f"system row {key!r} must have a value only")
            system[key] = value
        return system

    def to_node(self, order: int, root: bool) -> Node:
        """Interpret the rows as a node of a tree of ``order``; reject anything malformed."""
        system = self.system_rows()
        for key in (CREATED_AT, N_KEYS):
            if key not in system:
                raise CorruptFileError(self.path, f"missing system row {key!r}")
        if root and CATALOG_DEF not in system:
            raise CorruptFileError(self.path, "root node without a catalog_def row")
        if not root and any(k in system for k in ROOT_ONLY_KEYS):
            raise CorruptFileError(self.path, "non-root node carries root-only system rows")
        created = _parse_int(self.path, CREATED_AT, system[CREATED_AT])
        n_keys = _parse_int(self.path, N_KEYS, system[N_KEYS])
        if n_keys > order - 1:
            raise CorruptFileError(self.path, f"n_keys {n_keys} exceeds order {order} - 1")
        start = len(system)
        end = start + order
        if len(self.keys) < end:
            raise CorruptFileError(
                self.path, f"expected {order} pivot rows, found {len(self.keys) - start}"
            )
        if self.keys[start] is not None or self.values[start] is not None:
            raise CorruptFileError(self.path, "pivot row 0 must have NULL key and value")
        keys = self.keys[start + 1 : start + 1 + n_keys]
        values = self.values[start + 1 : start + 1 + n_keys]
        pnodes = self.pnodes[start : start + 1 + n_keys]
        # each check runs in C over a whole column; a failing one finds its row after
        if None in keys or None in values:
            raise CorruptFileError(self.path, f"pivot rows 1..{n_keys} need a key and a value")
        if not all(map(operator.lt, keys, keys[1:])):  # type: ignore[arg-type]
            row = next(i for i in range(1, len(keys)) if keys[i - 1] >= keys[i])  # type: ignore[operator]
            raise CorruptFileError(self.path, f"pivot keys out of order at row {row + 1}")
        is_leaf = pnodes[0] is None
        if pnodes.count(None) != (len(pnodes) if is_leaf else 0):
            raise CorruptFileError(self.path, "child pointers must be all set or all NULL")
        pad = slice(start + 1 + n_keys, end)
        padding = end - pad.start
        if any(column[pad].count(None) != padding
               for column in (self.keys, self.values, self.pnodes)):
            row = next(i for i in range(pad.start, end)
                       if (self.keys[i], self.values[i], self.pnodes[i]) != (None, None, None))
            raise CorruptFileError(self.path, f"pivot row {row - start} beyond n_keys is not NULL")
        tail = slice(end, len(self.keys))
        actions = list(zip(self.keys[tail], self.values[tail], strict=True))
        if actions and (not root or None in self.keys[tail] or None in self.values[tail]
                        or self.pnodes[tail].count(None) != len(actions)):
            row = next(i for i in range(end, len(self.keys)) if not root or None in (
                self.keys[i], self.values[i]) or self.pnodes[i] is not None)
            raise CorruptFileError(self.path, f"unexpected row {row} after the pivot table")
        return Node(
            keys=tuple(keys),  # type: ignore[arg-type]
            values=tuple(values),  # type: ignore[arg-type]
            children=None if is_leaf else tuple(pnodes),  # type: ignore[arg-type]
            created_at_millis=created,
            catalog_def=system.get(CATALOG_DEF),
            previous_root=system.get(PREVIOUS_ROOT),
            rollback_from_root=system.get(ROLLBACK_FROM_ROOT),
            actions=tuple(actions),  # type: ignore[arg-type]
            source=self.path,
        )


def _parse_int(path: str, key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise CorruptFileError(path, f"system row {key!r} is not an integer: {value!r}") from None
    if number < 0:
        raise CorruptFileError(path, f"system row {key!r} is negative")
    return number


def parse_node_file(data: bytes, path: str) -> NodeFile:
    """Read the Arrow IPC file; reject anything that is not exactly the node schema, and
    rows that do not match the file's checksum (ruling 13)."""
    try:
        reader = ipc.open_file(pa.BufferReader(data))
        if reader.num_record_batches != 1:
            raise CorruptFileError(
                path, f"expected one record batch, found {reader.num_record_batches}"
            )
        batch = reader.get_batch(0)
        if not batch.schema.equals(SCHEMA):
            raise CorruptFileError(
                path, f"schema is {batch.schema}, expected key/value/pnode utf8")
        batch.validate(full=True)  # offsets and UTF-8 checked before any value is read
        expected = (reader.schema.metadata or {}).get(CHECKSUM_KEY)
        raw = NodeFile(
            path=path,
            keys=batch.column(0).to_pylist(),
            values=batch.column(1).to_pylist(),
            pnodes=batch.column(2).to_pylist(),
        )
    except CorruptFileError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(path, f"not an Arrow IPC file ({exc})") from None
    if expected is not None:
        actual = rows_digest(raw.keys, raw.values, raw.pnodes)
        if expected != actual.encode("ascii"):
            raise CorruptFileError(
                path, f"checksum mismatch: rows hash to {actual}, the file records "
                f"{expected.decode('ascii', errors='replace')}")
    return raw


def decode_node(data: bytes, path: str, order: int, root: bool = False) -> Node:
    return parse_node_file(data, path).to_node(order, root)


def encode_node(node: Node, order: int) -> bytes:
    """Serialize a node as the format's Arrow IPC file."""
    n = len(node.keys)
    if n > order - 1:
        raise ValueError(f"node has {n} keys, more than order {order} allows")
    keys: list[str | None] = [CREATED_AT, N_KEYS]
    values: list[str | None] = [str(node.created_at_millis), str(n)]
    for name in ROOT_ONLY_KEYS:
        value = getattr(node, name)
        if value is not None:
            keys.append(name)
            values.append(value)
    pnodes: list[str | None] = [None] * len(keys)
    children = node.children
    keys.append(None)
    values.append(None)
    pnodes.append(children[0] if children else None)
    for i in range(n):
        keys.append(node.keys[i])
        values.append(node.values[i])
        pnodes.append(children[i + 1] if children else None)
    pad = order - 1 - n
    keys.extend([None] * pad)
    values.extend([None] * pad)
    pnodes.extend([None] * pad)
    for key, value in node.actions:
        keys.append(key)
        values.append(value)
        pnodes.append(None)
    schema = SCHEMA.with_metadata({CHECKSUM_KEY: rows_digest(keys, values, pnodes)})
    batch = pa.record_batch(
        [pa.array(keys, pa.utf8()), pa.array(values, pa.utf8()), pa.array(pnodes, pa.utf8())],
        schema=schema,
    )
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())
