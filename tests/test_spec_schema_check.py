"""The spec's JSON Schema: its file declares the keys olympia.spec.fields describes, and the
fast validity check (olympia.spec.schema, fastjsonschema under draft 7) gives jsonschema's
draft 2020-12 verdict on every document: it lets valid documents skip jsonschema, so a
document it passes must be one jsonschema passes, and it must not refuse valid ones."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from olympia.spec.fields import FIELDS, spec_keys
from olympia.spec.fmt import KEY_ORDER
from olympia.spec.schema import (
    schema,
    schema_text,
    validator,
    validity_check,
    with_described_keys,
)
from olympia.spec.yamlpos import load_documents

ROOT = Path(__file__).resolve().parents[1]
REPLACEMENTS: list[Any] = [
    None, True, False, 0, 1, 2, 3, 1.0, 2.5, -1, "", " ", "x", "a b", "x-y", "int8", "strct",
    "decimal(12,2)", "decimal(39,2)", "varchar(0)", "timestamp(3)", "external", "managed",
    "ns.t", [], ["x"], [1], [{}], {}, {"x": 1}, {"x-note": 1}, {"name": "c", "type": "int8"},
    {"namespace": "n", "name": "t"},
]


def test_schema_file_declares_the_described_keys() -> None:
    """specs/olympia-spec.schema.json (the file the package and inspect ship) holds each
    kind's keys as olympia.spec.fields describes them, byte for byte: after a change there,
    ``make schema`` writes them."""
    path = ROOT / "specs" / "olympia-spec.schema.json"
    text = path.read_text("utf-8")
    assert text == schema_text(with_described_keys(json.loads(text))), (
        "specs/olympia-spec.schema.json differs from olympia.spec.fields: run make schema")
    assert json.loads(text) == schema()  # the one the loader validates with
    for kind in FIELDS:  # and fmt's canonical order is the description's
        assert KEY_ORDER[kind.label] == spec_keys(kind)


def documents() -> list[Any]:
    """Every document of the example specs, and one of the benchmark's generated specs."""
    docs = []
    for path in sorted((ROOT / "examples" / "catalog").glob("*.yaml")):
        problems: list[Any] = []
        docs += [d.data for d in load_documents(path.read_text(), str(path), None, problems)]
        assert not problems
    docs.append({"manage": ["tmp_*"]})
    docs.append({  # keys the examples leave out
        "namespace": "n", "renamed_from": "m", "protected": True, "x-common": {"a": 1},
        "tables": {"t": {"table_type": "managed", "format_version": 2, "renamed_from": "s",
                         "location": "s3://b/t", "columns": [
                             {"name": "c", "type": "int8", "renamed_from": "d",
                              "properties": {"p": 1.5}}]},
                   "u": {"format": "parquet", "format_properties": {"k": "v"},
                         "columns": [{"name": "c", "type": "int8"}]}},
        "views": {"v": {"sql": "SELECT 1", "references": [{"namespace": "a.b", "name": "t"},
                                                            "n.t"]}}})
    return docs


def paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        yield from paths(item, (*path, key))


def replaced(doc: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def verdicts(doc: Any) -> tuple[bool, bool]:
    return validity_check()(doc), next(validator().iter_errors(doc), None) is None


def test_agrees_with_jsonschema_on_every_mutation() -> None:
    """Each value of each example replaced by each of many values, deleted, or given an
    extra key: the same verdict as jsonschema, and both verdicts are seen."""
    seen = {True: 0, False: 0}
    for doc in documents():
        for path in paths(doc):
            variants = [replaced(doc, path, v) for v in REPLACEMENTS]
            if path:
                variants.append(replaced(doc, path, None, delete=True))
            target = doc
            for key in path:
                target = target[key]
            if isinstance(target, dict):
                variants += [replaced(doc, path, {**target, extra: "v"})
                             for extra in ("unknown", "x-extension", "")]
            for variant in variants:
                fast, slow = verdicts(variant)
                assert fast == slow, (path, variant if not path else "...")
                seen[slow] += 1
    assert seen[True] > 100 and seen[False] > 100, seen


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.sampled_from(["", "x", "int8", "list", "map", "struct", "varchar(10)", "ns.t", "x-a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "type", "fields", "element", "key", "value", "nullable",
                         "columns", "sql", "references", "x-a", "other"]), inner, max_size=4),
    max_leaves=12)


@given(st.data())
def test_agrees_with_jsonschema_on_random_values(data: st.DataObject) -> None:
    doc = data.draw(st.sampled_from(documents()))
    path = data.draw(st.sampled_from(list(paths(doc))))
    variant = replaced(doc, path, data.draw(json_values))
    fast, slow = verdicts(variant)
    assert fast == slow
