"""Node codec: exact round trips, and malformed files rejected with the file named."""

from __future__ import annotations

import hashlib
import struct

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from olympia.exceptions import CorruptFileError
from olympia.tree import node as node_module
from olympia.tree.node import (
    CHECKSUM_KEY,
    SCHEMA,
    Node,
    decode_node,
    encode_node,
    parse_node_file,
    rows_digest,
)

ORDER = 4
LEAF = Node(("a", "b"), ("def/a", "def/b"), None, 42)
INTERNAL = Node(("m",), ("def/m",), ("node/l.arrow", "node/r.arrow"), 43)
ROOT = Node(("k",), ("def/k",), ("node/1.arrow", "node/2.arrow"), 44, catalog_def="def/c",
            previous_root="vn/" + "0" * 32, actions=(("catalog_def", "AAAA"),))


def rows(keys: list, values: list, pnodes: list) -> bytes:
    batch = pa.record_batch([pa.array(keys, pa.utf8()), pa.array(values, pa.utf8()),
                             pa.array(pnodes, pa.utf8())], schema=SCHEMA)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize("node,root", [(LEAF, False), (INTERNAL, False), (ROOT, True)])
def test_round_trip(node: Node, root: bool) -> None:
    data = encode_node(node, ORDER)
    assert decode_node(data, "f", ORDER, root=root) == node
    raw = parse_node_file(data, "f")
    system = len(raw.system_rows())
    assert len(raw.keys) == system + ORDER + len(node.actions)  # exactly N pivot rows
    assert raw.keys[system] is None and raw.values[system] is None


GOOD_SYSTEM = (["created_at_millis", "n_keys"], ["1", "1"], [None, None])


def leaf_rows(**changes: list) -> bytes:
    keys = [*GOOD_SYSTEM[0], None, "a", None, None]
    values = [*GOOD_SYSTEM[1], None, "def/a", None, None]
    pnodes = [None] * 6
    parts = {"keys": keys, "values": values, "pnodes": pnodes, **changes}
    return rows(parts["keys"], parts["values"], parts["pnodes"])


@pytest.mark.parametrize("data,reason", [
    (b"not arrow at all", "not an Arrow IPC file"),
    (rows(["created_at_millis", "n_keys", None, "a", None],
          ["1", "1", None, "def/a", None], [None] * 5), "expected 4 pivot rows"),
    (leaf_rows(values=["1", "7", None, "def/a", None, None]), "exceeds order"),
    (leaf_rows(keys=["created_at_millis", "bogus", None, "a", None, None]),
     "unknown system key"),
    (leaf_rows(values=["x", "1", None, "def/a", None, None]), "not an integer"),
    (leaf_rows(keys=["created_at_millis", "n_keys", "z", "a", None, None]),
     "unknown system key"),
    (leaf_rows(pnodes=[None, None, "node/x", None, None, None]), "all set or all NULL"),
    (leaf_rows(keys=["created_at_millis", "n_keys", None, "a", "stray", None]),
     "pivot row 2 beyond n_keys is not NULL"),
    (leaf_rows(pnodes=[None, None, None, None, None, "node/x"]),
     "pivot row 3 beyond n_keys is not NULL"),
    (leaf_rows(keys=["created_at_millis", "n_keys", None, None, None, None]),
     r"pivot rows 1\.\.1 need a key and a value"),
    (leaf_rows(keys=["created_at_millis", "n_keys", None, "b", "a", None],
               values=["1", "2", None, "def/b", "def/a", None]),
     "pivot keys out of order at row 2"),
    (rows([*GOOD_SYSTEM[0], None, "a", None, None, "s.t"],
          [*GOOD_SYSTEM[1], None, "def/a", None, None, "action"], [None] * 7),
     "unexpected row 6 after the pivot table"),  # actions belong to a root only
])
def test_malformed_files_are_rejected(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptFileError, match=reason) as err:
        decode_node(data, "s3://bucket/cat/node/x.arrow", ORDER)
    assert "s3://bucket/cat/node/x.arrow" in str(err.value)


def test_a_root_action_row_with_a_child_pointer_is_named() -> None:
    raw = parse_node_file(encode_node(ROOT, ORDER), "f")
    last = len(raw.keys) - 1
    pnodes = [*raw.pnodes[:-1], "node/x"]
    with pytest.raises(CorruptFileError, match=f"unexpected row {last} after the pivot table"):
        decode_node(rows(raw.keys, raw.values, pnodes), "f", ORDER, root=True)


def test_wrong_schema_and_misplaced_rows() -> None:
    other = pa.schema([pa.field("key", pa.utf8()), pa.field("value", pa.int64()),
                       pa.field("pnode", pa.utf8())])
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, other) as writer:
        writer.write_batch(pa.record_batch([pa.array(["a"]), pa.array([1]), pa.array(["b"])],
                                           schema=other))
    with pytest.raises(CorruptFileError, match="schema"):
        decode_node(bytes(sink.getvalue().to_pybytes()), "f", ORDER)
    with pytest.raises(CorruptFileError, match="root-only"):
        decode_node(encode_node(ROOT, ORDER), "f", ORDER, root=False)
    with pytest.raises(CorruptFileError, match="catalog_def"):
        decode_node(encode_node(LEAF, ORDER), "f", ORDER, root=True)
    out_of_order = Node(("b", "a"), ("1", "2"), None, 1)
    with pytest.raises(CorruptFileError, match="out of order"):
        decode_node(encode_node(out_of_order, ORDER), "f", ORDER)


def test_checksum_is_written_and_a_stale_one_is_refused() -> None:
    data = encode_node(LEAF, ORDER)
    recorded = ipc.open_file(pa.BufferReader(data)).schema.metadata[CHECKSUM_KEY]
    raw = parse_node_file(data, "f")
    assert recorded == rows_digest(raw.keys, raw.values, raw.pnodes).encode()
    # the same rows with one value changed, written under the old checksum
    changed = [v if v != "def/a" else "def/A" for v in raw.values]
    batch = pa.record_batch([pa.array(raw.keys, pa.utf8()), pa.array(changed, pa.utf8()),
                             pa.array(raw.pnodes, pa.utf8())], schema=SCHEMA)
    schema = SCHEMA.with_metadata({CHECKSUM_KEY: recorded})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(batch.replace_schema_metadata(schema.metadata))
    with pytest.raises(CorruptFileError, match="node/x.arrow: checksum mismatch"):
        decode_node(bytes(sink.getvalue().to_pybytes()), "node/x.arrow", ORDER)


def test_file_without_checksum_reads_unverified() -> None:
    """Files written before ruling 13 (or by another writer) have no checksum key."""
    assert decode_node(leaf_rows(), "f", ORDER).keys == ("a",)


def test_cells_are_delimited_in_the_digest() -> None:
    assert rows_digest(["ab"], [None], [None]) != rows_digest(["a"], ["b"], [None])
    assert rows_digest([""], [None], [None]) != rows_digest([None], [None], [None])


def test_every_single_bit_flip_is_refused_or_harmless() -> None:
    """A flip is refused naming the file, or hit bytes no reader uses (same node)."""
    data = encode_node(ROOT, ORDER)
    harmless = 0
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        try:
            node = decode_node(bytes(flipped), "node/x.arrow", ORDER, root=True)
        except CorruptFileError as exc:
            assert exc.path == "node/x.arrow"
            continue
        assert node == ROOT, bit
        harmless += 1
    assert harmless < len(data) * 8 * 0.6  # most bytes matter: the check is not vacuous


def _reference_digest(rows: list[tuple[str | None, str | None, str | None]]) -> str:
    """Ruling 13's row digest, written out plainly."""
    digest = hashlib.sha256()
    for row in rows:
        for cell in row:
            raw = None if cell is None else cell.encode("utf-8")
            digest.update(b"\x00" if raw is None
                          else b"\x01" + struct.pack(">I", len(raw)) + raw)
    return digest.hexdigest()


def test_digest_is_the_same_whatever_the_row_cache_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_module, "_ROWS_MAX", 5)  # emptied many times below
    rows = [(f"k{i}é", None if i % 3 else f"v{i}", "p" * (i % 4) or None) for i in range(40)]
    for start in range(0, 40, 7):
        part = rows[start:] + rows[:start]
        keys, values, pnodes = (list(c) for c in zip(*part, strict=True))
        assert rows_digest(keys, values, pnodes) == _reference_digest(part)
        assert len(node_module._ROWS) <= 5
