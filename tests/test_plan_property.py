"""Property-based: any spec converges in one apply (re-planning shows nothing), A then B ends
exactly where B alone does — with renames by hint (namespaces, tables, views, columns),
reordered columns, protected objects and view columns — and inspect writes back what plans
to nothing."""

from __future__ import annotations

import copy
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_helpers import memory_catalog, plan_for, state, write_spec

from olympia.exceptions import ProtectedDropError
from olympia.plan import apply_plan, inspect

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
KEYS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               min_size=1, max_size=6)
properties = st.dictionaries(KEYS, TEXT, max_size=3)
SIMPLE = st.sampled_from(["int4", "BIGINT", "varchar", "string", "date", "decimal(10,2)",
                          "Decimal(12, 3)", "boolean", "timestamp", "timestamptz9", "uuid",
                          "char(2)", "float8", "json"])
COLUMN_NAMES = ["x", "y", "z", "w", "on"]


def hint(names: list[str]) -> st.SearchStrategy[dict[str, str]]:
    """No ``renamed_from``, or one naming any of ``names`` (conflicting ones are dropped by
    :func:`to_docs`)."""
    return st.one_of(st.just({}), st.sampled_from(names).map(lambda n: {"renamed_from": n}))


def _part(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A nested type: struct, list or map of ``children``."""
    fields = st.lists(children, min_size=1, max_size=3, unique_by=lambda c: c["name"])
    unnamed = children.map(lambda c: {k: v for k, v in c.items() if k != "name"})
    return st.one_of(
        fields.map(lambda f: {"type": "struct", "fields": f}),
        unnamed.map(lambda e: {"type": "list", "element": e}),
        st.tuples(unnamed, unnamed).map(lambda kv: {"type": "map", "key": kv[0],
                                                    "value": kv[1]}),
    )


def _column(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    kind = SIMPLE.map(lambda t: {"type": t})
    if depth:
        kind = st.one_of(kind, _part(_column(depth - 1)))
    return st.builds(lambda name, k, nullable, comment: {
        "name": name, **k, "nullable": nullable, **({"comment": comment} if comment else {})},
        st.sampled_from(COLUMN_NAMES), kind, st.booleans(), TEXT)


top_columns = st.lists(st.tuples(_column(2), hint(COLUMN_NAMES)).map(lambda c: c[0] | c[1]),
                       max_size=4, unique_by=lambda c: c["name"])
tables = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.tuples(st.fixed_dictionaries({
    "columns": top_columns,
    "properties": properties,
    "comment": TEXT,
    "protected": st.booleans(),
    "format": st.sampled_from(["iceberg", "delta"]),
    "location": st.sampled_from(["", "s3://lake/t"]),
    "format_properties": properties,
}), hint(["a", "b", "c", "d", "v"])).map(lambda t: _fit(t[0] | t[1])), max_size=3)


def _fit(table: dict[str, Any]) -> dict[str, Any]:
    """An Iceberg table as a spec may declare it: no location or format properties (on a
    catalog without a warehouse it stays a definition), no types Iceberg cannot hold."""
    if table["format"] != "iceberg":
        return table
    del table["location"], table["format_properties"]
    table["columns"] = [_iceberg_types(c) for c in table["columns"]]
    return table


def _iceberg_types(column: dict[str, Any]) -> dict[str, Any]:
    out = dict(column)
    if out["type"] in ("json", "timestamptz9"):
        out["type"] = "varchar"
    if "fields" in out:
        out["fields"] = [_iceberg_types(f) for f in out["fields"]]
    for part in ("element", "key", "value"):
        if part in out:
            out[part] = _iceberg_types(out[part])
    return out
views = st.dictionaries(st.sampled_from(["a", "v", "w"]), st.tuples(st.fixed_dictionaries({
    "sql": TEXT.map(lambda t: f"SELECT {t!r}"), "dialect": st.sampled_from(["ansi", "spark"]),
    "properties": properties, "protected": st.booleans(),
    "columns": st.lists(_column(1), max_size=3, unique_by=lambda c: c["name"]),
}), hint(["a", "b", "v", "w", "u"])).map(lambda v: v[0] | v[1]), max_size=2)
namespaces = st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.tuples(
    st.fixed_dictionaries({"properties": properties, "comment": TEXT,
                           "protected": st.booleans(), "tables": tables, "views": views}),
    hint(["n1", "n2", "n3", "n4"])).map(lambda n: n[0] | n[1]), min_size=1, max_size=3)


def evolve(spec: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """``spec`` after typical edits: objects and columns renamed by hint, columns reordered,
    protection toggled."""
    out: dict[str, Any] = {}
    for ns, body in copy.deepcopy(spec).items():
        for kind in ("tables", "views"):
            renamed = {}
            for name, obj in body[kind].items():
                obj.pop("renamed_from", None)
                obj["protected"] = rnd.random() < 0.3
                if rnd.random() < 0.3:
                    obj["renamed_from"], name = name, f"{name}2"
                renamed[name] = obj
            body[kind] = renamed
        for table in body["tables"].values():
            rnd.shuffle(table["columns"])
            for column in table["columns"]:
                column.pop("renamed_from", None)
                if rnd.random() < 0.3:
                    column["renamed_from"] = column["name"]
                    column["name"] += "2"
        body.pop("renamed_from", None)
        if rnd.random() < 0.3:
            body["renamed_from"], ns = ns, f"{ns}r"
        out[ns] = body
    return out


def to_docs(spec: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec's documents; ``renamed_from`` hints the loader would reject, or planning
    against ``before`` (the documents the catalog holds), are dropped."""
    before = before or {}
    docs: dict[str, Any] = {"settings": {"manage": ["n*"]}}
    renamed: set[str] = set()
    for ns, body in copy.deepcopy(spec).items():
        old = body.get("renamed_from")
        if old is not None and (old == ns or old in spec or old in renamed
                                or (old in before and ns in before)):
            del body["renamed_from"]
        elif old is not None:
            renamed.add(old)
        body["views"] = {n: v for n, v in body["views"].items() if n not in body["tables"]}
        for view in body["views"].values():  # a view reads the namespace's first table, if any
            view["references"] = [f"{ns}.{t}" for t in list(body["tables"])[:1]]
        was = before.get(body.get("renamed_from") if body.get("renamed_from") in before else ns,
                         {"tables": {}, "views": {}})
        _object_hints(body, was)
        docs[ns] = {"namespace": ns, **body}
    return docs


def _object_hints(body: dict[str, Any], was: dict[str, Any]) -> None:
    for kind, other in (("tables", "views"), ("views", "tables")):
        renamed: set[str] = set()
        for name, obj in body[kind].items():
            old = obj.get("renamed_from")
            if old is None:
                continue
            if (old == name or old in body["tables"] or old in body["views"] or old in renamed
                    or (old in was[kind] and (name in was["tables"] or name in was["views"]))
                    or old in was[other]):
                del obj["renamed_from"]
            else:
                renamed.add(old)
    for name, table in body["tables"].items():
        old = table.get("renamed_from", name)  # a hint naming no table of before is unused
        source = was["tables"].get(old if old in was["tables"] else name) or {"columns": []}
        _column_hints(table["columns"], {c["name"] for c in source["columns"]})


def _column_hints(columns: list[dict[str, Any]], was: set[str]) -> None:
    names = {c["name"] for c in columns}
    renamed: set[str] = set()
    for column in columns:
        old = column.get("renamed_from")
        if old is None:
            continue
        if old == column["name"] or old in names or old in renamed or (
                old in was and column["name"] in was):
            del column["renamed_from"]
        else:
            renamed.add(old)


def unprotected(docs: dict[str, Any]) -> dict[str, Any]:
    """``docs`` with nothing protected (what must be applied before protected objects can
    be dropped)."""
    out = copy.deepcopy(docs)
    for doc in out.values():
        for obj in [doc, *doc.get("tables", {}).values(), *doc.get("views", {}).values()]:
            if "protected" in obj:
                obj["protected"] = False
    return out


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(data=st.data(), first=namespaces)
def test_specs_converge_and_a_then_b_equals_b(data: st.DataObject,
                                              first: dict[str, Any]) -> None:
    second = data.draw(st.one_of(namespaces, st.randoms().map(lambda r: evolve(first, r))))
    with tempfile.TemporaryDirectory() as tmp:
        catalog = memory_catalog()
        docs_a = to_docs(first)
        spec_a = write_spec(Path(tmp) / "a", docs_a)
        apply_plan(catalog, plan_for(catalog, spec_a))
        assert not plan_for(catalog, spec_a).has_changes
        spec_b = write_spec(Path(tmp) / "b", to_docs(second, docs_a))
        plan = plan_for(catalog, spec_b)
        if plan.blocked:  # protected objects: refused, until a spec unprotects them
            version = catalog.version
            with pytest.raises(ProtectedDropError):
                apply_plan(catalog, plan, allow_destructive=True)
            assert catalog.refresh() == version
            unprotect = write_spec(Path(tmp) / "u", unprotected(docs_a))
            apply_plan(catalog, plan_for(catalog, unprotect), allow_destructive=True)
            plan = plan_for(catalog, spec_b)
            assert not plan.blocked
        before = catalog.version
        version = apply_plan(catalog, plan, allow_destructive=True).version
        assert catalog.version == version <= before + 1  # one version per apply
        assert not plan_for(catalog, spec_b).has_changes
        fresh = memory_catalog()
        apply_plan(fresh, plan_for(fresh, spec_b))
        assert state(catalog) == state(fresh)


@SETTINGS
@given(spec=namespaces)
def test_inspect_round_trips_any_catalog(spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = memory_catalog()
        apply_plan(catalog, plan_for(catalog, write_spec(Path(tmp) / "a", to_docs(spec))))
        inspect(catalog, Path(tmp) / "out")
        assert not plan_for(catalog, Path(tmp) / "out").has_changes
