"""Property-based: any spec converges in one apply (re-planning shows nothing), A then B ends
exactly where B alone does, and inspect writes back what plans to nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_helpers import memory_catalog, plan_for, state, write_spec

from olympia.plan import apply_plan, inspect

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
KEYS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               min_size=1, max_size=6)
properties = st.dictionaries(KEYS, TEXT, max_size=3)
SIMPLE = st.sampled_from(["int4", "BIGINT", "varchar", "string", "date", "decimal(10,2)",
                          "Decimal(12, 3)", "boolean", "timestamp", "timestamptz9", "uuid",
                          "char(2)", "float8", "json"])


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
        st.sampled_from(["x", "y", "z", "w", "on"]), kind, st.booleans(), TEXT)


tables = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.fixed_dictionaries({
    "columns": st.lists(_column(2), max_size=4, unique_by=lambda c: c["name"]),
    "properties": properties,
    "comment": TEXT,
    "format": st.sampled_from(["iceberg", "delta"]),
    "location": st.sampled_from(["", "s3://lake/t"]),
    "format_properties": properties,
}), max_size=3)
namespaces = st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.fixed_dictionaries({
    "properties": properties, "comment": TEXT, "tables": tables,
    "views": st.dictionaries(st.sampled_from(["a", "v", "w"]), st.fixed_dictionaries({
        "sql": TEXT.map(lambda t: f"SELECT {t!r}"), "dialect": st.sampled_from(["ansi", "spark"]),
        "properties": properties}), max_size=2),
}), min_size=1, max_size=3)


def to_docs(spec: dict[str, Any]) -> dict[str, Any]:
    docs: dict[str, Any] = {"settings": {"manage": ["n*"]}}
    for ns, body in spec.items():
        views = {name: view for name, view in body["views"].items() if name not in body["tables"]}
        for view in views.values():  # a view reads the namespace's first table, if any
            view["references"] = [f"{ns}.{t}" for t in list(body["tables"])[:1]]
        docs[ns] = {"namespace": ns, **body, "views": views}
    return docs


SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(first=namespaces, second=namespaces)
def test_specs_converge_and_a_then_b_equals_b(first: dict[str, Any],
                                              second: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = memory_catalog()
        spec_a = write_spec(Path(tmp) / "a", to_docs(first))
        apply_plan(catalog, plan_for(catalog, spec_a))
        assert not plan_for(catalog, spec_a).has_changes
        spec_b = write_spec(Path(tmp) / "b", to_docs(second))
        version = apply_plan(catalog, plan_for(catalog, spec_b), allow_destructive=True).version
        assert catalog.version == version <= 2  # one version per apply, none when no change
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
