"""Every class of spec error is reported as file:line:col: message, all at once, and nothing
is written to the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_helpers import memory_catalog, plan_for, spec_problems, write_spec, write_text

from olympia import Catalog
from olympia.exceptions import SpecError
from olympia.spec import yamlpos


def one(tmp_path: Path, text: str, **variables: str) -> str:
    """The single problem of a one-file spec, with the file's path replaced by ``F``."""
    path = write_text(tmp_path, "a.yaml", text)
    (problem,) = spec_problems(tmp_path, **variables)
    return problem.replace(str(path), "F")


@pytest.mark.parametrize(("text", "expected"), [
    ("namespace: [unclosed\n", "F:2:1: invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ("namespace: s\ntables:\n  t: {}\n  t: {}\n", "F:4:3: duplicate key 't' (first at line 3)"),
    ("namespace: s\nprops: {}\n",
     "F:2:1: unknown key 'props' (did you mean 'properties'?); allowed: comment, manage, "
     "namespace, properties, protected, renamed_from, tables, views"),
    ("namespace: s\ntables:\n  t:\n    colums: []\n",
     "F:4:5: tables.t: unknown key 'colums' (did you mean 'columns'?); allowed: columns, "
     "comment, format, format_properties, format_version, location, partition_by, properties, "
     "protected, renamed_from, sort_by, table_type"),
    ("namespace: s\nviews:\n  v: {dialect: spark}\n",
     "F:3:6: views.v: missing required key 'sql'"),
    ("namespace: s\nprotected: maybe\n", "F:2:12: protected: 'maybe' is not of type 'boolean'"),
    ("comment: x\n", "F:1:1: a document declares a namespace ('namespace: NAME' with its "
                     "tables and views) or managed namespace patterns ('manage: [PATTERN]')"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: id, type: bigintt}\n",
     "F:5:26: column 'id': unknown type 'bigintt'; known types: binary, boolean, char(N), "
     "date, decimal(P,S), fixed(N), float4, float8, int1, int2, int4, int8, json, list, map, "
     "struct, time3, time6, time9, timestamp3, timestamp6, timestamp9, timestamptz3, "
     "timestamptz6, timestamptz9, timetz3, timetz6, timetz9, uuid, varchar, varchar(N)"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - name: a\n        type: list\n"
     "        element: {type: struct, fields: [{name: x, type: \"decimal(50,2)\"}]}\n",
     "F:7:58: column 'x': invalid decimal precision/scale in 'decimal(50,2)'"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: s, type: struct}\n",
     "F:5:25: column 's': struct column 's' needs fields"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: a, type: \"list<int>\"}\n",
     "F:5:25: column 'a': 'list<int>' is not a type: write a type name, with "
     "parameters where it takes them (int8, varchar(20), decimal(12,2)); nested types are "
     "type: struct, list or map with fields, element or key and value"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: x, type: decimal(10,2)}\n",
     "F:5:36: tables.t.columns[0]: a type with a comma was split by YAML flow syntax: quote "
     "it, e.g. type: \"decimal(12,2)\""),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - name: a\n        type: struct\n"
     "        fields: [{name: x, type: int, renamed_from: y}]\n",
     "F:7:39: tables.t.columns[0].fields[0]: unknown key 'renamed_from'; allowed: comment, "
     "element, fields, key, name, nullable, properties, type, value"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: a, type: int}\n"
     "      - {name: a, type: int}\n", "F:6:16: duplicate column 'a' (also at F:5:9)"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - name: a\n        type: struct\n"
     "        fields: [{name: x, type: int}, {name: x, type: int}]\n",
     "F:7:47: column 'a': duplicate field 'x'"),
    ("namespace: bad name\n", "F:1:12: namespace: 'bad name' is not allowed here: names may "
                              "not contain control characters, space or DEL, and references "
                              "are written namespace.name"),
    ("namespace: s\ntables:\n  \"a\\tb\": {}\n", "F:3:3: tables: 'a\\tb' is not allowed here: "
                                                  "names may not contain control characters, "
                                                  "space or DEL, and references are written "
                                                  "namespace.name"),
    (f"namespace: s\ntables:\n  {'t' * 101}: {{}}\n",
     f"F:3:3: table name '{'t' * 101}' is 101 bytes; the catalog allows 100"),
    ("namespace: s\ntables:\n  t: {}\nviews:\n  t: {sql: SELECT 1}\n",
     "F:5:3: s.t is already declared at F:3:3"),
    ("namespace: s\nviews:\n  v: {sql: SELECT 1, references: [s.missing]}\n",
     "F:3:35: view s.v references s.missing: the spec declares no such table or view"),
    ("namespace: s\nviews:\n  v: {sql: SELECT 1, references: [nodot]}\n",
     "F:3:35: views.v.references[0]: a reference is 'namespace.name' or {namespace: NS, "
     "name: NAME} (for namespaces containing dots)"),
    ("namespace: s\nviews:\n  v: {sql: SELECT 1, references: [s.v]}\n",
     "F:3:35: view s.v references s.v: a view cannot read itself"),
    ("namespace: s\ntables:\n  a: {renamed_from: b}\n  b: {}\n",
     "F:3:21: renamed_from 'b': s.b is declared too; a renamed table's old name cannot stay"),
    ("namespace: s\ntables:\n  a: {renamed_from: c}\n  b: {renamed_from: c}\n",
     "F:4:21: table s.c is already renamed at F:3:21"),
    ("namespace: s\nrenamed_from: s\n", "F:2:15: renamed_from 's' is the namespace's own name"),
    ("namespace: s\ntables:\n  t:\n    columns:\n      - {name: a, type: int, renamed_from: b}\n"
     "      - {name: b, type: int}\n",
     "F:5:44: renamed_from 'b': a column 'b' is declared too; a renamed column's old name "
     "cannot stay"),
    ("namespace: s\ncomment: ${var.missing}\n",
     "F:2:10: undefined variable 'missing': give --var missing=VALUE, a --var-file, or the "
     "environment variable OLYMPIA_VAR_missing"),
    ("namespace: s\nproperties:\n  ${var.k}: v\n",
     "F:3:3: variables are allowed in values only, not in the key '${var.k}'"),
    ("namespace: s\nproperties: &p {a: 1}\ntables:\n  t:\n    properties:\n      <<: p\n",
     "F:6:11: a merge key (<<) takes a mapping or a list of mappings, e.g. <<: *defaults"),
    ("namespace: s\ncomment: !!python/name:os.system x\n",
     "F:2:10: cannot read this value: could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/name:os.system'"),
])
def test_each_error_class_points_at_file_line_col(tmp_path: Path, text: str,
                                                  expected: str) -> None:
    assert one(tmp_path, text) == expected


def test_bad_keys_are_reported_at_the_key_not_at_the_first_key(tmp_path: Path) -> None:
    path = write_text(tmp_path, "a.yaml", """
        namespace: s
        color: red
        tables:
          good: {}
          "bad name": {}
        views:
          v: {sql: SELECT 1}
          "": {sql: SELECT 1}
        properties:
          a: 1
          "": 2
        size: 1
    """)
    found = [p.replace(str(path), "F") for p in spec_problems(tmp_path)]
    assert found == [
        "F:2:1: unknown key 'color'; allowed: comment, manage, "
        "namespace, properties, protected, renamed_from, tables, views",
        "F:5:3: tables: 'bad name' is not allowed here: names may not contain control "
        "characters, space or DEL, and references are written namespace.name",
        "F:8:3: views: a key must not be empty",
        "F:11:3: properties: a key must not be empty",
        "F:12:1: unknown key 'size'; allowed: comment, manage, namespace, properties, "
        "protected, renamed_from, tables, views"]


def test_schema_errors_do_not_hide_semantic_errors(tmp_path: Path) -> None:
    """Schema errors leave out the table or view (or the top-level key) they are in, not
    the document: everything else is still checked, without false alarms about what was
    left out."""
    write_text(tmp_path, "a.yaml", """
        namespace: s
        protected: maybe
        tables:
          broken: {colums: []}
          t:
            columns:
              - {name: a, type: bigintt}
        views:
          v: {sql: SELECT 1, references: [s.broken, s.t, s.missing]}
          broken: {sql: SELECT 1}
    """)
    write_text(tmp_path, "b.yaml", """
        namespace: "bad name"
        views:
          w: {sql: SELECT 1, references: ["bad name.missing"]}
    """)
    write_text(tmp_path, "c.yaml", """
        namespace: s
        tables:
          t2: {renamed_from: broken}
    """)
    found = [p.replace(str(tmp_path) + "/", "") for p in spec_problems(tmp_path)]
    assert found == [
        "a.yaml:2:12: protected: 'maybe' is not of type 'boolean'",
        "a.yaml:4:12: tables.broken: unknown key 'colums' (did you mean 'columns'?); "
        "allowed: columns, comment, format, format_properties, format_version, location, "
        "partition_by, properties, protected, renamed_from, sort_by, table_type",
        "a.yaml:7:25: column 'a': unknown type 'bigintt'; known types: binary, boolean, "
        "char(N), date, decimal(P,S), fixed(N), float4, float8, int1, int2, int4, int8, json, "
        "list, map, struct, time3, time6, time9, timestamp3, timestamp6, timestamp9, "
        "timestamptz3, timestamptz6, timestamptz9, timetz3, timetz6, timetz9, uuid, varchar, "
        "varchar(N)",
        "a.yaml:9:50: view s.v references s.missing: the spec declares no such table or view",
        "a.yaml:10:3: s.broken is already declared at a.yaml:4:3",
        "b.yaml:1:12: namespace: 'bad name' is not allowed here: names may not contain "
        "control characters, space or DEL, and references are written namespace.name",
        "b.yaml:3:35: views.w.references[0]: a reference is 'namespace.name' or {namespace: "
        "NS, name: NAME} (for namespaces containing dots)",
        "c.yaml:1:12: namespace s is already declared at a.yaml:1:12"]


def test_too_deep_documents_are_problems_not_crashes(tmp_path: Path) -> None:
    limit = yamlpos.MAX_DEPTH
    for depth in (limit, 100_000):  # libyaml's composer would overflow the C stack
        assert one(tmp_path, "namespace: s\ncomment: " + "[" * depth + "]" * depth + "\n") == (
            f"F:2:{10 + limit - 1}: collections nested more than {limit} levels deep")
    path = write_text(tmp_path, "a.yaml", "namespace: s\na: &a " + "[" * 60 + "]" * 60
                      + "\nb: " + "[" * 60 + "*a" + "]" * 60 + "\n")  # too deep expanded
    assert [p for p in spec_problems(tmp_path) if "nested" in p] == [
        f"{path}:2:{7 + limit - 61}: collections nested more than {limit} levels deep"]


def test_references_of_renamed_objects_name_the_new_name(tmp_path: Path) -> None:
    write_text(tmp_path, "a.yaml", """
        namespace: s
        renamed_from: old
        tables:
          new_t: {renamed_from: t}
        views:
          v: {sql: SELECT 1, references: [old.x, s.t]}
    """)
    found = [p.split(": ", 1)[1] for p in spec_problems(tmp_path)]
    assert found == [
        "view s.v references old.x: namespace old is renamed to s by this spec: reference s.x",
        "view s.v references s.t: s.t is renamed to s.new_t by this spec: reference the new "
        "name"]


def test_all_problems_of_all_files_at_once_sorted(tmp_path: Path) -> None:
    write_text(tmp_path, "a.yaml", """
        namespace: sales
        tables:
          orders:
            columns:
              - {name: id, type: bigintt}
              - {name: id2, type: "decimal(50,2)"}
    """)
    write_text(tmp_path, "b.yaml", "namespace: sales\n")
    write_text(tmp_path, "c.yaml", "namespace: hr\nviews:\n  v: {sql: x, references: [hr.n]}\n")
    write_text(tmp_path, "d.yaml", "namespace: [unclosed\n")
    write_text(tmp_path, "e.yaml", """
        namespace: e
        comment: ${var.a} ${var.b}
        color: red
        views:
          v: {sql: x, references: [e.gone], dialect: 1}
          w: {sql: x, references: [e.gone]}
    """)
    found = spec_problems(tmp_path)
    where = [p.split(": ", 1)[0].replace(str(tmp_path) + "/", "") for p in found]
    assert where == ["a.yaml:5:26", "a.yaml:6:27", "b.yaml:1:12", "c.yaml:3:28", "d.yaml:2:1",
                     "e.yaml:2:10", "e.yaml:2:10", "e.yaml:3:1", "e.yaml:5:46",
                     "e.yaml:6:28"]
    assert "namespace sales is already declared at " in found[2]
    assert "views.v.dialect: 1 is not of type 'string'" in found[8]
    assert "view e.w references e.gone: the spec declares no such table or view" in found[9]


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    assert spec_problems(tmp_path / "nope") == [f"{tmp_path / 'nope'}: no such file or directory"]
    assert spec_problems(tmp_path) == [f"{tmp_path}: no .yaml or .yml files"]


def test_alias_cycles_and_alias_bombs_are_errors(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert one(tmp_path, "namespace: s\ncomment: &a [*a]\n").endswith(
        "F:2:10: an alias refers to the collection that contains it")
    monkeypatch.setattr(yamlpos, "MAX_NODES", 10_000)  # the real limit is 2 million
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(7))
    assert one(tmp_path, "namespace: s\n" + bomb) == (  # where the limit was reached
        "F:2:32: more than 10000 values after expanding aliases")


# --- problems found against the catalog (plan time): nothing is written ------------------------


def plan_problems(catalog: Catalog, spec: Path) -> list[str]:
    version = catalog.refresh()
    with pytest.raises(SpecError) as err:
        plan_for(catalog, spec)
    assert catalog.refresh() == version
    return [p.replace(str(spec) + "/", "") for p in err.value.problems]


def test_names_beyond_the_catalogs_limits(tmp_path: Path) -> None:
    catalog = Catalog.create(f"memory://limits-{id(tmp_path)}", table_name_max_size_bytes=8)
    write_text(tmp_path, "a.yaml", "namespace: s\ntables:\n  a_long_name: {}\n")
    assert plan_problems(catalog, tmp_path) == [
        "a.yaml:3:3: table name 'a_long_name' is 11 bytes; the catalog allows 8"]


def test_references_outside_the_spec_must_exist_and_stay(tmp_path: Path) -> None:
    catalog = memory_catalog()
    catalog.create_namespace("ext")
    catalog.create_table("ext", "t")
    catalog.create_namespace("tmp_1")
    catalog.create_table("tmp_1", "t")
    write_text(tmp_path, "a.yaml", """
        namespace: s
        views:
          ok: {sql: SELECT 1, references: [ext.t]}
          bad: {sql: SELECT 1, references: [ext.missing, tmp_1.t]}
    """)
    write_text(tmp_path, "b.yaml", "manage: [tmp_*]\n")
    assert plan_problems(catalog, tmp_path) == [
        "a.yaml:4:37: view s.bad references ext.missing: neither the spec declares it nor "
        "the catalog has it",
        "a.yaml:4:50: view s.bad references tmp_1.t: namespace tmp_1 is managed by a manage "
        "pattern but not declared, so this plan drops it; declare it or narrow the pattern"]


def test_rename_hints_that_contradict_the_catalog(tmp_path: Path) -> None:
    catalog = memory_catalog()
    for ns in ("a", "b", "s"):
        catalog.create_namespace(ns)
    catalog.create_table("s", "t1", columns=[{"name": "x", "type": "int"},
                                             {"name": "y", "type": "int"}])
    catalog.create_table("s", "t2")
    catalog.create_view("s", "v", sql="SELECT 1")
    write_spec(tmp_path, {
        "b": {"namespace": "b", "renamed_from": "a"},
        "s": {"namespace": "s", "tables": {
            "t1": {"renamed_from": "t2", "columns": [
                {"name": "x", "type": "int"}, {"name": "z", "renamed_from": "y", "type": "int"},
                {"name": "y2", "type": "int"}]},
            "t3": {"columns": [{"name": "x", "type": "int"}]},
            "w": {"renamed_from": "v"}}},
    })
    catalog.create_table("s", "t3", columns=[{"name": "x", "type": "int"},
                                             {"name": "x2", "type": "int"}])
    problems = plan_problems(catalog, tmp_path)
    assert problems == [
        "b.yaml:1:12: renamed_from a: namespaces a and b both exist in the catalog; remove "
        "the hint to keep b (and drop a), or drop b first",
        "s.yaml:3:3: renamed_from t2: s.t2 and s.t1 both exist in the catalog; remove the hint "
        "to keep s.t1 (and drop s.t2), or drop s.t1 first",
        "s.yaml:17:3: renamed_from v: s.v is a view, not a table",
    ]
